"""``lucid doctor`` for the email channel: IMAP login and folder, IDLE, SMTP login.

The IMAP check logs in (sending ``ID`` as the channel does), selects the folder read-only
(``EXAMINE``: nothing is marked) and says whether the server offers IDLE — without it the
channel polls every ``pollIntervalS``, which works but answers later. The SMTP check
connects with the configured security (STARTTLS, implicit TLS or none) and logs in; no mail
is sent. Whether owners can be recognised at all is a third line: without ``authservId``
every owner's mail counts as a guest's.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lucidgate.config.schema import Config
from lucidgate.gateway.ops.checks import Result, fail, ok, warn

if TYPE_CHECKING:
    from lucidgate.channels.email.settings import EmailSettings

__all__ = ["email_checks"]

TIMEOUT_S = 15.0


async def email_checks(config: Config) -> list[Result]:
    section = config.channels.email
    if not section.enabled:
        return []
    from lucidgate.channels.email import preflight
    from lucidgate.channels.email.settings import EmailSettings

    reason = preflight(section)
    if reason is not None:
        return [fail("email", reason, "see docs/channels/email.md")]
    settings = EmailSettings.from_section(section, timeout_s=TIMEOUT_S)
    results = [await _imap(settings), await _smtp(settings)]
    if not settings.authserv_id:
        results.append(warn("email owners", "channels.email.authservId is not set: mail from an owner's "
                            "address is treated as a guest's",
                            "set it to your receiving server's Authentication-Results name (docs/channels/email.md)"))
    return results


async def _imap(settings: EmailSettings) -> Result:
    import aioimaplib  # the channel's client libraries: loaded only when the channel is on

    from lucidgate.channels.email.imap import ImapError, open_session

    where = f"{settings.imap_host}:{settings.imap_port}"
    try:
        async with asyncio.timeout(TIMEOUT_S * 2):
            client = await open_session(settings)
            try:
                response = await client.examine(settings.folder)
                idle = client.has_capability("IDLE")
            finally:
                await client.logout()
    except ImapError as exc:
        fix = "check channels.email.username and password (an app password where the provider has them)" \
            if exc.login else "check the server's answer above"
        return fail("email imap", f"{where}: {exc}", fix)
    except (aioimaplib.AioImapException, OSError, TimeoutError) as exc:
        return fail("email imap", f"{where} unreachable ({type(exc).__name__}: {exc})",
                    "check channels.email.imapHost, imapPort and imapSecurity")
    if response.result != "OK":
        return fail("email imap", f"logged in, but the folder {settings.folder!r} cannot be opened",
                    "check channels.email.folder")
    if not idle:
        return warn("email imap", f"{settings.imap_user} on {where}, folder {settings.folder}; the server has "
                    f"no IDLE: new mail is fetched every {settings.poll_interval_s:g} s",
                    "lower channels.email.pollIntervalS to answer sooner")
    return ok("email imap", f"{settings.imap_user} on {where}, folder {settings.folder}, IDLE")


async def _smtp(settings: EmailSettings) -> Result:
    import aiosmtplib

    from lucidgate.channels.email.smtp import smtp_client

    where = f"{settings.smtp_host}:{settings.smtp_port} ({settings.smtp_security})"
    client = smtp_client(settings)
    try:
        async with asyncio.timeout(TIMEOUT_S * 2):
            await client.connect()
            try:
                if settings.smtp_user and settings.smtp_password:
                    await client.login(settings.smtp_user, settings.smtp_password)
            finally:
                await client.quit()
    except aiosmtplib.SMTPAuthenticationError as exc:
        return fail("email smtp", f"{where} refused the login: {exc.code} {exc.message}",
                    "check channels.email.smtpUsername/smtpPassword (empty: the IMAP login)")
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        return fail("email smtp", f"{where}: {type(exc).__name__}: {exc}",
                    "check channels.email.smtpHost, smtpPort and smtpSecurity")
    return ok("email smtp", f"{settings.smtp_user} on {where}")

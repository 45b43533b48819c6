"""Sending one reply over SMTP with aiosmtplib, and what a failure means for the outbox.

A connection per reply: an assistant sends a few mails an hour, and a pooled connection
would have to survive the server's idle timeout for nothing. ``smtpSecurity`` picks
STARTTLS (587, required: a server that does not offer it is an error, never a silent
plaintext fallback), implicit TLS (465) or no TLS (a server on this machine).

Failures become the outbox's typed errors (``channels._ratelimit``): a 5xx refusal of the
mail or its recipient is permanent (dead-lettered, one warning); everything else — 4xx
greylisting, a refused login (a password being fixed), timeouts, a server down — is
retried with the outbox's backoff until ``deliveryDeadlineH``.
"""

from __future__ import annotations

import asyncio
from email.message import EmailMessage

import aiosmtplib

from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry, DeliveryUncertain
from lucidgate.channels.email.settings import EmailSettings

__all__ = ["send_mail", "smtp_client"]


def smtp_client(settings: EmailSettings) -> aiosmtplib.SMTP:
    """A client for the configured server (not yet connected)."""
    security = settings.smtp_security
    return aiosmtplib.SMTP(hostname=settings.smtp_host, port=settings.smtp_port, timeout=settings.timeout_s,
                           use_tls=security == "ssl", start_tls=True if security == "starttls" else False)


async def send_mail(settings: EmailSettings, msg: EmailMessage, recipient: str) -> None:
    """Hand ``msg`` to the SMTP server for ``recipient``; raise the outbox's errors on failure."""
    client = smtp_client(settings)
    try:
        async with asyncio.timeout(settings.timeout_s * 3):
            await client.connect()
            try:
                if settings.smtp_user and settings.smtp_password:
                    await client.login(settings.smtp_user, settings.smtp_password)
                await client.send_message(msg, sender=settings.address, recipients=[recipient])
            finally:
                try:
                    await client.quit()
                except (aiosmtplib.SMTPException, OSError):
                    client.close()
    except aiosmtplib.SMTPRecipientsRefused as exc:
        codes = [r.code for r in exc.recipients]
        raise DeliveryFailed(f"the SMTP server refused {recipient}: {exc}",
                             permanent=all(c >= 500 for c in codes)) from exc
    except aiosmtplib.SMTPAuthenticationError as exc:
        raise DeliveryRetry(f"the SMTP server refused the login ({exc.code}): check channels.email "
                            "smtpUsername/smtpPassword") from exc
    except aiosmtplib.SMTPResponseException as exc:
        if exc.code >= 500:
            raise DeliveryFailed(f"the SMTP server refused the mail: {exc.code} {exc.message}",
                                 permanent=True) from exc
        raise DeliveryRetry(f"the SMTP server deferred the mail: {exc.code} {exc.message}") from exc
    except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPReadTimeoutError) as exc:
        # The data may have been accepted just before the line dropped.
        raise DeliveryUncertain(f"the SMTP connection ended mid-send: {exc}") from exc
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        raise DeliveryRetry(f"SMTP server {settings.smtp_host}:{settings.smtp_port} unreachable: "
                            f"{type(exc).__name__}: {exc}") from exc

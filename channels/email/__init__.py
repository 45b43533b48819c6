"""The email channel package: a mailbox read over IMAP and answered over SMTP.

Built on aioimaplib (asyncio IMAP with IDLE) and aiosmtplib (asyncio SMTP with STARTTLS and
implicit TLS), and the standard ``email`` package for parsing and building messages; HTML-only
mail becomes text through html2text. ``build`` is the registry's factory: it refuses early,
with the setting to fix, when the section cannot work, and otherwise returns an
``EmailChannel``.

Modules: ``channel`` (lifecycle, intake decisions, sending), ``imap`` (the IMAP session: IDLE
or polling, the watchdog, mailbox care), ``state`` (UIDVALIDITY and the last handled UID),
``threads`` (conversations: which mail a reply answers, and whether it was answered),
``parse`` (a raw mail to text and attachments), ``strip`` (quotes and signatures),
``guards`` (mail that must never be answered), ``authres`` (Authentication-Results),
``compose`` (a reply as a MIME message), ``smtp`` (sending it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lucidgate.channels.base import ChannelUnavailable
from lucidgate.channels.deps import ChannelDeps

if TYPE_CHECKING:
    from lucidgate.channels.email.channel import EmailChannel
    from lucidgate.config.schema import Config, EmailConfig

__all__ = ["build", "preflight"]


def preflight(section: EmailConfig) -> str | None:
    """Why this section cannot work (None when it can): checked before anything connects."""
    address = section.address.strip()
    if "@" not in address or address.startswith("@") or address.endswith("@"):
        return "no bot address (set channels.email.address, e.g. assistant@example.org)"
    if not section.imap_host.strip():
        return "no IMAP server (set channels.email.imapHost, e.g. imap.example.org)"
    if not section.password.get_secret_value():
        return "no password (set channels.email.password; an app password where the provider has them)"
    if section.after_handling == "move" and not section.move_to.strip():
        return "afterHandling is \"move\" but channels.email.moveTo names no folder"
    return None


def build(config: Config, deps: ChannelDeps) -> EmailChannel:
    """The registry's factory (mail has no command menu, so ``deps.commands`` is unused)."""
    section = config.channels.email
    reason = preflight(section)
    if reason is not None:
        raise ChannelUnavailable(reason)
    from lucidgate.channels.email.channel import EmailChannel
    from lucidgate.channels.email.settings import EmailSettings

    return EmailChannel(EmailSettings.from_section(section), deps.bus, workspace=deps.workspace,
                        pairing=deps.pairing)

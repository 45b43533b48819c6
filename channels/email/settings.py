"""``EmailSettings``: everything the email channel reads, frozen, made from its section.

``from_section`` copies ``channels.email`` in, filling the defaults that depend on other keys
(the login is the address unless set; SMTP uses the IMAP login unless set). The tuning
fields are not configuration — connect and command timeouts, reconnect backoff — and tests
shorten them with ``from_section(section, retry_base_s=0.05)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lucidgate.config.channel_schema import EmailConfig

__all__ = ["EmailSettings"]


@dataclass(frozen=True, slots=True)
class EmailSettings:
    """What the email channel runs with; ``access`` is the section the gate reads."""

    access: EmailConfig
    address: str
    from_name: str
    imap_host: str
    imap_port: int
    imap_tls: bool
    imap_user: str
    imap_password: str
    folder: str
    smtp_host: str
    smtp_port: int
    smtp_security: str
    smtp_user: str
    smtp_password: str
    authserv_id: str
    idle: bool
    poll_interval_s: float
    idle_refresh_s: float
    watchdog_s: float
    after_handling: str
    move_to: str
    answer_lists: bool
    max_attachment_bytes: int
    max_mail_bytes: int
    # Tuning, not configuration (see the module docstring).
    timeout_s: float = 30.0
    retry_base_s: float = 1.0
    retry_max_s: float = 60.0

    @property
    def domain(self) -> str:
        """The bot's mail domain (Message-IDs of its replies are made in it)."""
        return self.address.rpartition("@")[2] or "localhost"

    @classmethod
    def from_section(cls, section: EmailConfig, **tuning: Any) -> EmailSettings:
        """The settings of ``channels.email``; ``tuning`` overrides the tuning fields."""
        address = section.address.strip()
        user = section.username.strip() or address
        password = section.password.get_secret_value()
        return cls(access=section, address=address, from_name=section.from_name,
                   imap_host=section.imap_host.strip(), imap_port=section.imap_port,
                   imap_tls=section.imap_security == "ssl", imap_user=user, imap_password=password,
                   folder=section.folder or "INBOX", smtp_host=section.smtp_host.strip() or section.imap_host.strip(),
                   smtp_port=section.smtp_port, smtp_security=section.smtp_security,
                   smtp_user=section.smtp_username.strip() or user,
                   smtp_password=section.smtp_password.get_secret_value() or password,
                   authserv_id=section.authserv_id.strip(), idle=section.idle,
                   poll_interval_s=section.poll_interval_s, idle_refresh_s=section.idle_refresh_s,
                   watchdog_s=section.watchdog_s, after_handling=section.after_handling,
                   move_to=section.move_to.strip(), answer_lists=section.answer_lists,
                   max_attachment_bytes=section.max_attachment_bytes, max_mail_bytes=section.max_mail_bytes,
                   **tuning)

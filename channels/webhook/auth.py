"""Who may do what on the webhook API, and which role a webhook chat belongs to (DESIGN §9).

Three credentials, three jobs:

* ``channels.webhook.token`` is an *integration* credential. It posts messages; whoever holds
  it is never the owner: a request naming a ``sender_id`` listed in ``channels.webhook.owners``
  is refused (403) — otherwise anyone holding it could claim an owner's id and get owner tools.
  On the sessions API it sees only the chats it wrote to, and never an owner's chat: every
  chat id posted with a token is recorded here under the token's SHA-256 fingerprint (never
  the token itself), so a rotated token does not inherit what the old one wrote.
* ``channels.webhook.ownerToken`` is the *owner* credential: only with it does a sender listed
  in ``owners`` speak as the owner; it reads owner chats and the chats it wrote to.
* ``channels.webhook.adminToken`` is the *admin* credential: it lists, reads and resets every
  webhook session. Empty (the default) means no one has that power; reading a chat the
  integration token did not write is then refused with a message naming the setting.

A chat never mixes roles. The first message into a ``chat_id`` claims the chat for its
sender's role (owner or guest); a later message from the other role is refused with 403,
because its turn would be built on the first role's transcript — an owner's memory lines
and tool results shown to a guest, or a guest's words archived where Dream learns about the
owner. Several guests may share a guest chat (the integration chose to put them there);
several owners share an owner chat. The claim is durable (SQLite, ``synchronous=FULL``) so a
restart cannot reopen a chat to the other role. Chats used before this record existed are
claimed by whoever writes next.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from fastapi.responses import JSONResponse

from lucidgate.channels._sqlite import SqliteStore
from lucidgate.channels.gate import Role
from lucidgate.channels.webhook.api import error_response
from lucidgate.config.schema import WebhookConfig

Credential = Literal["admin", "owner", "integration"]

ADMIN_SETTING = "channels.webhook.adminToken"
OWNER_SETTING = "channels.webhook.ownerToken"
TOKEN_SETTING = "channels.webhook.token"
SETTING_OF: dict[Credential, str] = {"admin": ADMIN_SETTING, "owner": OWNER_SETTING, "integration": TOKEN_SETTING}
SESSION_403 = (f"The integration token did not write to this chat (or it is an owner's chat); reading or "
               f"resetting it needs {ADMIN_SETTING} (or {OWNER_SETTING} for an owner's chat).")
LIST_SCAN_LIMIT = 100_000  # sessions scanned to filter the integration token's own chats

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chat_roles (
    chat_id TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    claimed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chat_writers (
    token_fp TEXT NOT NULL,
    chat_id TEXT NOT NULL,
    first_at REAL NOT NULL,
    PRIMARY KEY (token_fp, chat_id)
);
"""


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def spender_of(setting: str) -> str:
    """Who pays for the guest turns a credential starts: the credential itself, whatever sender
    ids its caller names (``usage.guestShare`` is then one share per integration). Named by its
    setting, never by anything derived from its value: usage journals are kept and backed up."""
    return f"credential:{setting}"


def classify(credential: str, *, token: str, admin_token: str, owner_token: str = "") -> Credential | None:
    """Which credential ``credential`` is (constant-time compares, all of them), or None."""
    given = credential.encode("utf-8")
    matches = {kind: bool(secret) and hmac.compare_digest(given, secret.encode("utf-8"))
               for kind, secret in (("admin", admin_token), ("owner", owner_token), ("integration", token))}
    for kind in ("admin", "owner", "integration"):
        if matches[kind]:
            return kind  # type: ignore[return-value]
    return None


def _classify(cfg: WebhookConfig, credential: str) -> Credential | None:
    return classify(credential, token=cfg.token.get_secret_value(), admin_token=cfg.admin_token.get_secret_value(),
                    owner_token=cfg.owner_token.get_secret_value())


def bearer(header: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <credential>`` header, else None."""
    if not header:
        return None
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    return credential if scheme.lower() == "bearer" and credential else None


def authorize(cfg: WebhookConfig, header: str | None) -> JSONResponse | None:
    """The refusal for a request without a valid credential (either token), else None."""
    token = cfg.token.get_secret_value()
    if not token:
        return error_response(503, "the webhook is disabled: channels.webhook.token is empty; set "
                                   "one (`lucid onboard --webhook-token` generates it) and restart the gateway")
    challenge = {"WWW-Authenticate": "Bearer"}
    if not header:
        return error_response(401, "missing 'Authorization: Bearer <token>' header", headers=challenge)
    credential = bearer(header)
    if credential is None:
        return error_response(401, "the Authorization header must be 'Bearer <token>'", headers=challenge)
    if _classify(cfg, credential) is None:
        return error_response(401, "invalid token", headers=challenge)
    return None


def caller(cfg: WebhookConfig, header: str | None) -> tuple[Credential, str]:
    """An already authorized caller's credential kind and token fingerprint."""
    credential = bearer(header) or ""
    return _classify(cfg, credential) or "integration", fingerprint(credential)


def owner_refusal(sender_id: str) -> str:
    return (f"sender_id {sender_id!r} is listed in channels.webhook.owners; speaking as the owner needs "
            f"the owner credential ({OWNER_SETTING}, `lucid onboard --webhook-owner-token` makes one) — "
            "the integration token never grants owner powers")


def may_read(kind: Credential, *, wrote: bool, role: Role | None) -> bool:
    """Whether a caller reads a chat: admin any; owner token owner chats and its own; the
    integration token only guest chats it wrote to (never an owner's, whatever it wrote)."""
    if kind == "admin":
        return True
    if kind == "owner":
        return wrote or role == "owner"
    return wrote and role != "owner"


def role_refusal(chat_id: str, claimed: Role) -> str:
    return (f"chat {chat_id!r} belongs to another role: it is {'an owner' if claimed == 'owner' else 'a guest'}"
            f"'s chat, and a session never mixes owners and guests (their turns would share one "
            f"transcript); use another chat_id for this sender")


def unwritten_refusal(key: str, admin_configured: bool) -> str:
    unset = "" if admin_configured else f" ({ADMIN_SETTING} is not set)"
    return (f"this token may not read {key!r}: the integration token reads only the guest chats it "
            f"wrote to, an owner's chat needs {OWNER_SETTING}; other sessions need {ADMIN_SETTING}{unset}")


class ChatLedger(SqliteStore):
    """Durable chat -> role claims and token -> chats-written records (``state/webhook_chats.sqlite``).

    Blocking (SQLite): call from a worker thread."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(path, _SCHEMA)
        self._clock = clock

    def claim(self, chat_id: str, role: Role, token_fp: str) -> Role:
        """Claim ``chat_id`` for ``role`` unless already claimed; record the writer token.

        Returns the chat's role (the earlier claim when there is one). The writer is recorded
        only when the roles match, i.e. when the message will be accepted."""
        with self._lock:
            db = self._conn()
            now = self._clock()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT OR IGNORE INTO chat_roles (chat_id, role, claimed_at) VALUES (?, ?, ?)",
                           (chat_id, role, now))
                row = db.execute("SELECT role FROM chat_roles WHERE chat_id = ?", (chat_id,)).fetchone()
                claimed: Role = "owner" if row[0] == "owner" else "guest"
                if claimed == role:
                    db.execute("INSERT OR IGNORE INTO chat_writers (token_fp, chat_id, first_at) "
                               "VALUES (?, ?, ?)", (token_fp, chat_id, now))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return claimed

    def role_of(self, chat_id: str) -> Role | None:
        """The role that claimed ``chat_id``, or None when nobody has."""
        with self._lock:
            row = self._conn().execute("SELECT role FROM chat_roles WHERE chat_id = ?", (chat_id,)).fetchone()
        if row is None:
            return None
        return "owner" if row[0] == "owner" else "guest"

    def roles(self) -> dict[str, Role]:
        """Every claimed chat and its role."""
        with self._lock:
            rows = self._conn().execute("SELECT chat_id, role FROM chat_roles").fetchall()
        return {str(c): ("owner" if r == "owner" else "guest") for c, r in rows}

    def wrote(self, token_fp: str, chat_id: str) -> bool:
        with self._lock:
            row = self._conn().execute("SELECT 1 FROM chat_writers WHERE token_fp = ? AND chat_id = ?",
                                       (token_fp, chat_id)).fetchone()
            return row is not None

    def chats_of(self, token_fp: str) -> set[str]:
        with self._lock:
            rows = self._conn().execute("SELECT chat_id FROM chat_writers WHERE token_fp = ?",
                                        (token_fp,)).fetchall()
            return {str(r[0]) for r in rows}

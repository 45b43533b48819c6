"""Pairing: a stranger asks for access with a one-time code the owner approves (DESIGN §9).

An unknown sender who writes to the bot gets a short code in its refusal; the owner runs
``lucid pairing approve <code>`` and from then on that sender is allowed on that channel.
Codes are single-use, expire after an hour, use an alphabet without look-alike characters,
at most a handful are outstanding per channel (a stranger cannot fill the file), and
failed approvals are counted: after too many wrong codes in an hour approval is locked
(and outstanding codes revoked) so guessing is pointless.

The store is one small JSON file shared by the gateway and the CLI, so every operation
re-reads it under a thread lock *and* a cross-process file lock, then writes it atomically.
In the gateway one instance serves every channel's gate (``ChannelDeps.pairing``): gates on
different channels call it from worker threads at once, and the thread lock orders them.
Methods are synchronous (the CLI uses them directly); async code calls them through
``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

from lucidgate.config.errors import LucidError
from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L look-alikes
CODE_LENGTH = 8
CODE_TTL_S = 3600.0
MAX_PENDING_PER_CHANNEL = 5
MAX_FAILED_APPROVALS = 10
FAILURE_WINDOW_S = 3600.0


class PairingError(LucidError):
    """A pairing code could not be issued (too many outstanding codes: try again later)."""


def default_path(workspace: Path) -> Path:
    """Where the gateway and ``lucid pairing`` keep the store."""
    return workspace / "state" / "pairing.json"


def normalize_code(code: str) -> str:
    """Codes are typed by hand: ignore case, spaces and dashes."""
    return "".join(ch for ch in code.upper() if ch not in " -\t")


class PairingStore:
    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._clock = clock
        self._lock = threading.Lock()
        self._file_lock = FileLock(str(self.path) + ".lock")
        self._cache_key: tuple[int, int, int] | None = None
        self._cache: dict[str, Any] = _empty()

    # -- public API --------------------------------------------------------------------
    def issue(self, channel: str, sender_id: str) -> str:
        """Return a code for ``sender_id`` (the same one while it is still valid)."""
        sender_id = str(sender_id)
        with self._locked() as data:
            now = self._clock()
            for entry in data["pending"]:
                if entry["channel"] == channel and entry["sender_id"] == sender_id:
                    return str(entry["code"])
            outstanding = sum(1 for e in data["pending"] if e["channel"] == channel)
            if outstanding >= MAX_PENDING_PER_CHANNEL:
                raise PairingError(
                    f"{outstanding} pairing requests on {channel} are already waiting; "
                    "approve or let them expire first"
                )
            existing = {e["code"] for e in data["pending"]}
            code = _new_code()
            while code in existing:
                code = _new_code()
            data["pending"].append(
                {"code": code, "channel": channel, "sender_id": sender_id, "expires_at": now + CODE_TTL_S}
            )
            logger.info("issued a pairing code for sender %s on %s", sender_id, channel)
            return code

    def approve(self, code: str) -> tuple[str, str] | None:
        """Consume ``code`` and allow its sender. None if unknown, expired or locked out."""
        wanted = normalize_code(code)
        with self._locked() as data:
            if len(data["failures"]) >= MAX_FAILED_APPROVALS:
                logger.warning("pairing approval is locked after too many wrong codes")
                return None
            match = next(
                (e for e in data["pending"] if secrets.compare_digest(e["code"].encode(), wanted.encode())),
                None,
            )
            if match is None:
                data["failures"].append(self._clock())
                if len(data["failures"]) >= MAX_FAILED_APPROVALS:
                    data["pending"] = []
                    logger.warning("too many wrong pairing codes: outstanding codes revoked")
                return None
            data["pending"].remove(match)
            approved = data["approved"].setdefault(match["channel"], [])
            if match["sender_id"] not in approved:
                approved.append(match["sender_id"])
            logger.info("approved sender %s on %s", match["sender_id"], match["channel"])
            return str(match["channel"]), str(match["sender_id"])

    def is_approved(self, channel: str, sender_id: str) -> bool:
        with self._lock:
            data = self._read_cached()
        return str(sender_id) in data["approved"].get(channel, [])

    def revoke(self, channel: str, sender_id: str) -> bool:
        """Withdraw an approval; True if there was one."""
        with self._locked() as data:
            approved = data["approved"].get(channel, [])
            if str(sender_id) not in approved:
                return False
            approved.remove(str(sender_id))
            return True

    def pending(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Outstanding (unexpired) requests, for ``lucid pairing list``."""
        with self._locked() as data:
            return [dict(e) for e in data["pending"] if channel is None or e["channel"] == channel]

    def approved(self, channel: str) -> list[str]:
        with self._lock:
            return list(self._read_cached()["approved"].get(channel, []))

    # -- storage -----------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """Read-modify-write under both locks; expired codes and old failures are pruned."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self._file_lock:
            data = self._read()
            before = json.dumps(data, sort_keys=True)
            now = self._clock()
            data["pending"] = [e for e in data["pending"] if e["expires_at"] > now]
            data["failures"] = [t for t in data["failures"] if t > now - FAILURE_WINDOW_S]
            yield data
            if json.dumps(data, sort_keys=True) != before:
                self._write(data)

    def _read_cached(self) -> dict[str, Any]:
        """``is_approved`` runs for every message: re-read only when the file changed."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._cache_key, self._cache = None, _empty()
            return self._cache
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._cache_key:
            self._cache, self._cache_key = self._read(), key
        return self._cache

    def _read(self) -> dict[str, Any]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return _empty()
        except (OSError, ValueError):
            logger.warning("%s is unreadable; treating it as empty", self.path)
            return _empty()
        data = _empty()
        if isinstance(raw, dict):
            data["pending"] = [e for e in raw.get("pending", []) if _valid_entry(e)]
            data["approved"] = {
                str(ch): [str(s) for s in ids]
                for ch, ids in (raw.get("approved") or {}).items()
                if isinstance(ids, list)
            }
            data["failures"] = [float(t) for t in raw.get("failures", []) if isinstance(t, int | float)]
        return data

    def _write(self, data: dict[str, Any]) -> None:
        atomic_write_text(self.path, json.dumps(data, indent=2, sort_keys=True))
        self._cache_key = None


def _empty() -> dict[str, Any]:
    return {"v": 1, "pending": [], "approved": {}, "failures": []}


def _valid_entry(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("code"), str)
        and isinstance(entry.get("channel"), str)
        and isinstance(entry.get("sender_id"), str)
        and isinstance(entry.get("expires_at"), int | float)
    )


def _new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))

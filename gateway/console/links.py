"""One-time login links: ``lucid console`` issues a code, the gateway redeems it once.

The two run in different processes, so the codes live in ``state/console_links.json``
(0600) under a file lock, stored only as SHA-256 digests with their expiry. A code is
deleted when it is redeemed or found expired. The code travels in the URL *fragment*
(``/#login=…``), which browsers never send to a server or put in a Referer; the page
posts it once and removes it from the address bar.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from pathlib import Path

from filelock import FileLock

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

LINKS_FILE = Path("state") / "console_links.json"


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode("utf-8")).hexdigest()


class LoginLinks:
    def __init__(self, workspace: Path) -> None:
        self.path = workspace / LINKS_FILE
        self._lock = FileLock(str(self.path) + ".lock", timeout=10)

    def _load(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            logger.warning("%s is unreadable; treating it as empty", self.path)
            return {}
        return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} \
            if isinstance(data, dict) else {}

    def _save(self, codes: dict[str, float]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps(codes))
        os.chmod(self.path, 0o600)

    def issue(self, ttl_s: float) -> str:
        """A new code valid for ``ttl_s`` seconds (blocking)."""
        code = secrets.token_urlsafe(24)
        now = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            codes = {k: v for k, v in self._load().items() if v > now}
            codes[_digest(code)] = now + ttl_s
            self._save(codes)
        return code

    def redeem(self, code: str) -> bool:
        """True once for a live code; the code is gone afterwards (blocking)."""
        if not code or len(code) > 200:
            return False
        now = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            codes = self._load()
            live = {k: v for k, v in codes.items() if v > now}
            digest = _digest(code)
            ok = any(secrets.compare_digest(digest, k) for k in live)
            live.pop(digest, None)
            if live != codes:
                self._save(live)
        return ok

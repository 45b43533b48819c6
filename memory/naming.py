"""How a session key becomes a file name under ``sessions/`` (DESIGN §3), and how a
transcript's first line names its session (``read_header``, for listings that need no store).

It lives in memory because the transcripts are memory's files; channels only produce the
keys (``InboundMessage.session_key``) and never need to know where they are stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def session_file_stem(key: str) -> str:
    """File-name-safe, collision-free form of a session key.

    ``:`` becomes ``_`` as DESIGN §3 shows; any other unsafe character is escaped, and a
    short hash of the exact key is appended whenever the readable form is lossy (contains
    ``_`` from the key itself, or escaped characters) so two keys can never share a file
    and no key can escape ``sessions/``.
    """
    readable = _SAFE.sub("-", key.replace(":", "_"))
    lossless = _SAFE.search(key.replace(":", "")) is None and "_" not in key
    if lossless and len(readable) <= 150 and not readable.startswith("."):
        return readable
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return f"{readable.lstrip('.')[:120]}~{digest}"


def read_header(path: Path) -> dict[str, Any] | None:
    """The metadata line of a transcript (its session key, origin, …), or None if it has none."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            header = json.loads(fh.readline())
    except (OSError, ValueError):
        logger.warning("session file %s has no readable metadata line; ignored", path.name)
        return None
    if not isinstance(header, dict) or header.get("_type") != "metadata" or "key" not in header:
        return None
    return header

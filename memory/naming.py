"""How a session key becomes a file name under ``sessions/`` (DESIGN §3).

It lives in memory because the transcripts are memory's files; channels only produce the
keys (``InboundMessage.session_key``) and never need to know where they are stored.
"""

from __future__ import annotations

import hashlib
import re

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

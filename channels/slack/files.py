"""Downloading files shared with the Slack bot into ``media/slack/<channel>/``.

Slack serves shared files only with the bot token in the ``Authorization`` header, so the
token is sent only to Slack's file host or the configured API host (never to a URL an event
merely names). Sizes are capped before and while streaming; writes are atomic.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from lucidgate.channels.slack.sdk import redact
from lucidgate.config.fileio import atomic_write_bytes

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 20 * 1024 * 1024


def _safe(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "", part)[:64] or "x"


class SlackFiles:
    """Owns the HTTP client for downloads; ``start``/``stop`` follow the channel's."""

    def __init__(self, *, bot_token: str, api_base: str, workspace: Path) -> None:
        self._bot_token = bot_token
        self._api_base = api_base
        self._workspace = workspace
        self._http: httpx.AsyncClient | None = None

    def start(self) -> None:
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=True)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def download(self, file: dict[str, Any], chat_id: str) -> tuple[str, str | None]:
        """Fetch one shared file; returns (description for the message text, path or None)."""
        file_id = _safe(str(file.get("id") or "file"))
        name = str(file.get("name") or file_id)
        kind = "image" if str(file.get("mimetype", "")).startswith("image/") else "file"
        url = str(file.get("url_private_download") or file.get("url_private") or "")
        raw_size = file.get("size")
        size = raw_size if isinstance(raw_size, int) else 0
        if not url or not self._trusted_file_url(url) or self._http is None:
            return f"[{kind}: {name} (not downloaded)]", None
        if size > MAX_FILE_BYTES:
            return f"[{kind}: {name} (too large: over {MAX_FILE_BYTES // 2**20} MB, not downloaded)]", None
        suffix = Path(name).suffix
        dest = self._workspace / "media" / "slack" / _safe(chat_id) / (
            file_id + (suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix) else ""))
        data = bytearray()
        try:
            headers = {"Authorization": f"Bearer {self._bot_token}"}
            async with self._http.stream("GET", url, headers=headers) as resp:
                if resp.status_code != 200:
                    raise ValueError(f"HTTP {resp.status_code}")
                async for chunk in resp.aiter_bytes():
                    data.extend(chunk)
                    if len(data) > MAX_FILE_BYTES:
                        return f"[{kind}: {name} (too large: over {MAX_FILE_BYTES // 2**20} MB)]", None
            await asyncio.to_thread(atomic_write_bytes, dest, bytes(data))
        except (httpx.HTTPError, OSError, ValueError) as exc:
            logger.warning("could not download Slack file %s: %s", file_id, redact(str(exc)))
            return f"[{kind}: {name} (download failed)]", None
        return f"[{kind}: {dest}]", str(dest)

    def _trusted_file_url(self, url: str) -> bool:
        """The bot token is only ever sent to Slack's file host or the configured API host."""
        parts, base = urlsplit(url), urlsplit(self._api_base)
        if parts.scheme == "https" and parts.hostname == "files.slack.com":
            return True
        return (parts.scheme, parts.netloc) == (base.scheme, base.netloc)

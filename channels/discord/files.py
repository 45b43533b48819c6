"""Attachments in: saved under ``media/discord/<channel>/`` in the workspace.

The path keeps the chat's id as its second folder, like every channel's media, so the file
tools let a guest's turn read only its own chat's files. Sizes are capped before the
download (Discord states each attachment's size) and after it; writes are atomic.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import discord

from lucidgate.channels.discord.format import safe_name
from lucidgate.config.fileio import atomic_write_bytes

logger = logging.getLogger(__name__)

MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024  # what a bot may be sent without Nitro boosts


async def save_attachments(attachments: list[discord.Attachment], chat_id: str,
                           workspace: Path) -> tuple[list[str], list[str]]:
    """Download each attachment; return (one note per attachment for the text, saved paths)."""
    notes: list[str] = []
    paths: list[str] = []
    for item in attachments:
        label = "image" if (item.content_type or "").startswith("image/") else "file"
        name = safe_name(item.filename)
        if item.size > MAX_DOWNLOAD_BYTES:
            notes.append(f"[{label} {name} not downloaded: {item.size / 1e6:.1f} MB is over the 25 MB limit]")
            continue
        rel = Path("media", "discord", safe_name(chat_id), f"{item.id}-{name}")
        try:
            data = await item.read()
            if len(data) > MAX_DOWNLOAD_BYTES:
                raise ValueError("over the 25 MB limit")
            await asyncio.to_thread(atomic_write_bytes, workspace / rel, data)
        except (discord.HTTPException, aiohttp.ClientError, ValueError, OSError) as exc:
            logger.warning("could not download attachment %s in channel %s: %s", item.id, chat_id, exc)
            notes.append(f"[{label} {name} could not be downloaded]")
            continue
        paths.append(rel.as_posix())
        notes.append(f"[{label}: {rel.as_posix()}]")
    return notes, paths

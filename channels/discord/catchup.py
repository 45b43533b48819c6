"""Catching up after a restart: what was said while no Gateway session was open.

Discord replays missed events only to a session that RESUMEs; a new process starts a new
session, so messages sent while the gateway was down (or still queued in a process that was
killed) would be lost. For every chat the adapter has handled a message in, the newest
handled message id (and whether the chat is a DM) is kept in ``state/discord.json``,
written atomically after the message is on the bus. When a new session starts, each chat's
messages after that id are fetched over REST (``GET /channels/{id}/messages?after=``,
oldest first) and go through the same intake; one already journalled is dropped by the
bus's dedupe id, so catching up never answers twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import discord

from lucidgate.config.fileio import atomic_write_text

logger = logging.getLogger(__name__)

MAX_CHATS = 500  # the most recently active chats are caught up
PER_CHAT = 100  # at most this many missed messages per chat (one REST page)


class CatchUp:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._chats: OrderedDict[str, tuple[int, bool]] = OrderedDict()  # id -> (last message, private)

    async def load(self) -> None:
        try:
            raw = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
            data = json.loads(raw)
            chats = {str(k): (int(v["last"]), bool(v["private"])) for k, v in data["chats"].items()}
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("ignoring unreadable %s (%s); no catch-up this time", self.path, exc)
            return
        self._chats = OrderedDict(sorted(chats.items(), key=lambda kv: kv[1][0]))

    async def note(self, chat_id: str, message_id: int, private: bool) -> None:
        """``message_id`` in ``chat_id`` is handled (on the bus, refused or ignored)."""
        last = self._chats.get(chat_id)
        if last is not None and last[0] >= message_id:
            return
        self._chats[chat_id] = (message_id, private)
        self._chats.move_to_end(chat_id)
        while len(self._chats) > MAX_CHATS:
            self._chats.popitem(last=False)
        doc = {"chats": {k: {"last": str(v[0]), "private": v[1]} for k, v in self._chats.items()}}
        await asyncio.to_thread(atomic_write_text, self.path, json.dumps(doc))

    async def missed(self, client: discord.Client) -> AsyncIterator[tuple[discord.Message, bool]]:
        """Each chat's messages after the last one handled, oldest first, with its DM flag."""
        for chat_id, (last, private) in list(self._chats.items()):
            channel = client.get_partial_messageable(int(chat_id))
            try:
                async for message in channel.history(limit=PER_CHAT, after=discord.Object(id=last),
                                                     oldest_first=True):
                    yield message, private
            except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
                logger.warning("could not catch up on Discord channel %s: %s", chat_id, exc)

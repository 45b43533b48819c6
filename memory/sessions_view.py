"""The read-only view of session transcripts that channels bound to it read.

The webhook's sessions API lists chats and what the assistant said in them; the web chat
shows the tool calls of a turn beside its reply. Both get this one view from the composition
root (``build_gateway`` puts it in the ``ChannelDeps`` every channel is built with), so no
channel reaches into the agent's session store.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lucidgate.memory.sessions import SessionStore, read_header

__all__ = ["SessionsOnDisk", "last_turn_tools"]


class SessionsOnDisk:
    """The read-only view of transcripts the webhook's sessions API uses: the default agent's,
    and through ``for_agent`` each other agent's (``agents``: their session stores by id)."""

    def __init__(self, sessions: SessionStore, agents: Mapping[str, SessionStore] | None = None, *,
                 default: str = "default") -> None:
        self.sessions = sessions
        self.default = default  # the default agent's id, whose view this is
        self._agents = {agent: SessionsOnDisk(store, default=agent) for agent, store in (agents or {}).items()
                        if agent and agent != default}

    def for_agent(self, agent: str) -> SessionsOnDisk | None:
        """The view of agent ``agent``'s transcripts ("" or the default's id: this one); None
        for an id that is no agent of this gateway."""
        return self if not agent or agent == self.default else self._agents.get(agent)

    @property
    def agents(self) -> builtins.list[str]:
        """The other agents' ids this view reaches."""
        return builtins.list(self._agents)

    async def list(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        def scan() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            if not self.sessions.dir.exists():
                return found
            for path in self.sessions.dir.glob("*.jsonl"):
                header = read_header(path)
                if header is None or not str(header["key"]).startswith(prefix):
                    continue
                key = str(header["key"])
                # The header is rewritten rarely (append-only log); the file's mtime is the
                # time of the last message.
                updated = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="milliseconds")
                found.append({"key": key, "chat_id": key[len(prefix):],
                              "created_at": header.get("created_at"), "updated_at": updated})
            found.sort(key=lambda s: s.get("updated_at") or "", reverse=True)
            return found[:limit]

        return await asyncio.to_thread(scan)

    async def said(self, key: str, after: int, limit: int) -> builtins.list[dict[str, Any]] | None:
        """What the assistant said in ``key`` after position ``after`` (answers, reminders,
        error notes), oldest first; positions are indexes into the append-only transcript."""
        if self.sessions.cached(key) is None and not await asyncio.to_thread(self.sessions.path_for(key).exists):
            return None
        session = await self.sessions.get(key)
        # Positions before ``released`` left the context: read those from the file.
        messages = session.messages if after >= session.released else await self.sessions.transcript(session)
        out: list[dict[str, Any]] = []
        for i in range(max(0, after), len(messages)):
            m = messages[i]
            if m.get("role") != "assistant" or m.get("tool_calls") or not isinstance(m.get("content"), str):
                continue
            kind = "reminder" if m.get("kind") == "reminder" else "error" if m.get("status") == "error" else "reply"
            out.append({"id": i + 1, "kind": kind, "text": m["content"], "timestamp": m.get("timestamp")})
            if len(out) >= limit:
                break
        return out

    async def recent(self, key: str, limit: int) -> dict[str, Any] | None:
        if self.sessions.cached(key) is None:
            exists = await asyncio.to_thread(self.sessions.path_for(key).exists)
            if not exists:
                return None
        session = await self.sessions.get(key)
        shown = [m for m in await self.sessions.transcript(session)
                 if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
                 and m.get("content")]
        return {"key": key, "pending": session.pending_state() is not None,
                "messages": [{"role": m["role"], "content": m["content"], "timestamp": m.get("timestamp")}
                             for m in shown[-limit:]]}

    async def turn_tools(self, key: str) -> builtins.list[dict[str, Any]]:
        """The tool calls (with results) of ``key``'s latest turn: the web chat shows them."""
        return last_turn_tools((await self.sessions.get(key)).messages)



def last_turn_tools(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls (with results) since the last user message: the web chat shows them."""
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1) + 1
    results = {m.get("tool_call_id"): str(m.get("content", "")) for m in messages[start:] if m.get("role") == "tool"}
    tools = []
    for msg in messages[start:]:
        for call in (msg.get("tool_calls") or []) if msg.get("role") == "assistant" else []:
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            tools.append({"name": str(fn.get("name", "?")),
                          "arguments": (args if isinstance(args, str) else json.dumps(args))[:2000],
                          "result": results.get(call.get("id"), "")[:2000]})
    return tools

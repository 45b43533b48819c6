"""Harness target adapter for ../shared/peer-bench: lucidgate, driven in-process.

The shared folder is read-only and its copy predates ``build_gateway(config, mode)``; copy
peer-bench somewhere writable, put this file over its ``targets/lucid.py``, then e.g.
``PHASES="cold throughput" LUCID_VENV=.venv NB_VENV=<nanobot venv> OUT=… NB_OUT=… ./peer_lucid.sh``.
``LUCID_EXTRA_MEMORY='{"search": {"enabled": false}}'`` merges into agents.defaults.memory.


Builds the gateway the way `lucid agent` does when no daemon is running (gateway/cli.py
`_agent_main`): load config.json -> install workspace templates -> take the workspace lock ->
`build_gateway(config, "agent")` (agent mode: no Dream or heartbeat jobs,
like nanobot's `process_direct`) -> a terminal-style channel -> `async with gateway`.
One user message = one `InboundMessage` on the bus from the CLI owner ("local", private chat),
answered when the matching reply comes back on the bus, exactly like `CliChannel.ask`; the
only difference is that the chat id is the harness's session name, so sessions are separate
transcripts. Logging is set up like `lucid gateway` (INFO, redacting handler on stderr), as
the nanobot adapter logs like `nanobot gateway`.

Defaults are left alone (all built-in tools, default prompts, maxConcurrentSessions 16,
contextWindowTokens 65536). Options the harness passes with --opt:
  context_window_tokens -> agents.defaults.contextWindowTokens (same name and meaning as nanobot's)
  max_tokens            -> agents.defaults.maxCompletionTokens (nanobot's maxTokens)
  max_concurrent_sessions -> agents.defaults.maxConcurrentSessions

Layout under `home`:
  home/config.json                        written by write_config() below
  home/workspace/                         AGENTS.md, SOUL.md, USER.md, memory/MEMORY.md,
                                          memory/history.jsonl, sessions/cli_<name>.jsonl, .git, ...
  home/lucid-stats.jsonl                  one line per close(): lucid's own counters (LLM calls by
                                          job, consolidation rounds, tool calls, error replies)
Run with the lucid venv's python (the harness itself is stdlib-only).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

CHANNEL = "cli"
OWNER = "local"          # the terminal user, owner by default (channels.cli.owners)


def write_config(home: Path, llm_base_url: str, *, context_window_tokens: int | None = None,
                 max_tokens: int | None = None, max_concurrent_sessions: int | None = None,
                 model: str = "openai/fake") -> Path:
    """Write a lucidgate config.json pointing the openai provider at llm_base_url."""
    defaults: dict = {"workspace": str(home / "workspace"), "model": model, "timezone": "UTC"}
    if context_window_tokens:
        defaults["contextWindowTokens"] = int(context_window_tokens)
    if max_tokens:
        defaults["maxCompletionTokens"] = int(max_tokens)
    if max_concurrent_sessions:
        defaults["maxConcurrentSessions"] = int(max_concurrent_sessions)
    cfg = {"agents": {"defaults": defaults},
           "providers": {"openai": {"apiKey": "x", "apiBase": llm_base_url}}}
    extra = os.environ.get("LUCID_EXTRA_MEMORY")  # experiments: JSON merged into agents.defaults.memory
    if extra:
        defaults["memory"] = json.loads(extra)
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.json"
    path.write_text(json.dumps(cfg, indent=2))
    return path


class _HarnessChannel:
    """`CliChannel` with the chat id taken per message (one chat per harness session)."""

    name = CHANNEL

    def __init__(self, bus) -> None:
        self.bus = bus
        self.waiters: dict[str, asyncio.Future] = {}
        self.errors: list[str] = []
        self.unsolicited = 0

    async def start(self) -> None:
        self.bus.subscribe(self.name, self.send)

    async def stop(self) -> None:
        self.bus.unsubscribe(self.name)
        for fut in self.waiters.values():
            if not fut.done():
                fut.cancel()

    async def send(self, msg) -> None:
        if msg.kind not in ("text", "error"):
            return
        fut = self.waiters.pop(msg.in_reply_to or "", None)
        if msg.kind == "error":
            self.errors.append(msg.text[:200])
        if fut is not None and not fut.done():
            fut.set_result(msg.text)
        else:
            self.unsolicited += 1

    async def ask(self, chat_id: str, text: str) -> str:
        from lucidgate.channels.messages import InboundMessage

        message_id = uuid.uuid4().hex[:16]
        fut = asyncio.get_running_loop().create_future()
        self.waiters[message_id] = fut
        await self.bus.publish_inbound(InboundMessage(
            channel=self.name, chat_id=chat_id, sender_id=OWNER, text=text,
            chat_type="private", message_id=message_id, role="owner"))
        return await fut


class LucidTarget:
    name = "lucidgate (in-process build_gateway, like `lucid agent`)"

    def __init__(self, home: Path, llm_base_url: str, context_window_tokens: int | None = None,
                 max_tokens: int | None = None, max_concurrent_sessions: int | None = None):
        self.home = Path(home)
        self.config_path = write_config(self.home, llm_base_url,
                                        context_window_tokens=context_window_tokens, max_tokens=max_tokens,
                                        max_concurrent_sessions=max_concurrent_sessions)
        self.gw = None
        self.channel = None
        self.lock = None
        self.workspace = self.home / "workspace"

    async def start(self) -> None:
        # What `lucid` (gateway/cli.py main) does before any command: litellm offline, umask 077.
        from lucidgate.gateway._offline import set_offline_environment
        set_offline_environment()
        os.umask(0o077)
        import logging
        from lucidgate.gateway.logs import secrets_from_config, setup_logging
        redactor = setup_logging(level=logging.INFO, fmt="text", stream=sys.stderr)   # as `lucid gateway`
        from lucidgate.config import load_config
        from lucidgate.config.onboard import install_templates
        from lucidgate.gateway.app import build_gateway
        from lucidgate.gateway.model.client import import_litellm
        from lucidgate.gateway.daemon.workspace_lock import WorkspaceLock

        config = load_config(self.config_path)
        redactor.add(secrets_from_config(config))
        install_templates(config.workspace)                 # _ensure_onboarded
        self.workspace = config.workspace
        # `lucid agent`/`gateway` import litellm on a background thread during start-up;
        # do it here so the first message does not pay for it (nanobot imports openai in start()).
        await asyncio.to_thread(import_litellm)
        self.lock = WorkspaceLock(config.workspace)
        self.lock.acquire()
        self.gw = build_gateway(config, "agent")
        self.channel = _HarnessChannel(self.gw.parts.bus)
        self.gw.add_channel(CHANNEL, self.channel)
        await self.gw.start()

    def _key(self, session: str) -> str:
        return f"{CHANNEL}:{session}"

    async def send(self, session: str, text: str) -> str:
        return await self.channel.ask(session, text)

    def session_file(self, session: str) -> Path | None:
        if self.gw is not None:
            return self.gw.parts.sessions.path_for(self._key(session))
        from lucidgate.memory.sessions import SessionStore
        return SessionStore(self.workspace / "sessions").path_for(self._key(session))

    def memory_files(self) -> dict:
        return {"memory": self.workspace / "memory" / "MEMORY.md",
                "history": self.workspace / "memory" / "history.jsonl"}

    def _stats(self) -> dict:
        counters: dict = {}
        for metric in self.gw.parts.metrics.registry.collect():
            for s in metric.samples:
                if s.name.endswith("_total") and s.value:
                    label = ",".join(f"{v}" for v in s.labels.values())
                    counters[f"{s.name[:-6]}[{label}]"] = s.value
        return {"counters": counters, "error_replies": len(self.channel.errors),
                "error_sample": self.channel.errors[:3], "unsolicited": self.channel.unsolicited}

    async def close(self) -> None:
        if self.gw is None:
            return
        try:
            await self.gw.stop()
        finally:
            try:
                with open(self.home / "lucid-stats.jsonl", "a") as f:
                    f.write(json.dumps(self._stats()) + "\n")
            except Exception as exc:          # stats are a side channel: never fail the run
                print(f"lucid adapter: stats not written: {exc!r}", file=sys.stderr)
            if self.lock is not None:
                self.lock.release()
            self.gw = None

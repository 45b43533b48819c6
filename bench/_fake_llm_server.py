"""Run the test kit's fake OpenAI server in its own process (so benches measure only us).

Prints the base URL on its first line, then serves until killed.
Usage: python bench/_fake_llm_server.py [latency_seconds] [short|soak]

``short`` answers "ok: " and the first 40 characters of what the user wrote (the runtime
context block before it left out), as a chat model's short reply would be, instead of
echoing the whole augmented message.

``soak`` (bench/bench_soak.py) answers turns like ``short``, answers the consolidator's
summary requests with one bullet (so chunks are archived as summaries, not ``[RAW]``) and
the silent memory-flush turn with ``NO_REPLY``; and it keeps only the last few requests,
because a soak sends hundreds of thousands and the server must not be what grows.
"""

from __future__ import annotations

import asyncio
import collections
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.llm import FakeLLMServer, Reply, message_text  # noqa: E402

SUMMARY_MARK = "You keep the long-term memory"  # memory/consolidation_prompt.py's system prompt
FLUSH_MARK = "[memory flush"  # gateway/agent/memory_flush.py's framing


def short_reply(server: FakeLLMServer, request: dict[str, Any]) -> Reply:
    return Reply("ok: " + server.last_user_text(request).split("\n\n")[-1][:40])


def soak_reply(server: FakeLLMServer, request: dict[str, Any]) -> Reply:
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    system = message_text(messages[0]) if messages and messages[0].get("role") == "system" else ""
    if system.startswith(SUMMARY_MARK):
        lines = [line for line in server.last_user_text(request).splitlines() if line.strip()]
        return Reply(f"- The user talked about: {lines[-1][-80:] if lines else 'nothing in particular'}")
    if FLUSH_MARK in server.last_user_text(request):
        return Reply("NO_REPLY")
    return short_reply(server, request)


async def main() -> None:
    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    server = await FakeLLMServer(latency=latency).start()
    if mode == "short":
        server.default = lambda request: short_reply(server, request)  # type: ignore[method-assign]
    elif mode == "soak":
        server.default = lambda request: soak_reply(server, request)  # type: ignore[method-assign]
        server.requests = collections.deque(maxlen=16)  # type: ignore[assignment]
        server.headers = collections.deque(maxlen=16)  # type: ignore[assignment]
    print(server.base_url, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())

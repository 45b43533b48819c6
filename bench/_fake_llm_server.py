"""Run the test kit's fake OpenAI server in its own process (so benches measure only us).

Prints the base URL on its first line, then serves until killed.
Usage: python bench/_fake_llm_server.py [latency_seconds] [short]

``short`` answers "ok: " and the first 40 characters of what the user wrote (the runtime
context block before it left out), as a chat model's short reply would be, instead of
echoing the whole augmented message.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.llm import FakeLLMServer, Reply  # noqa: E402


async def main() -> None:
    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    server = await FakeLLMServer(latency=latency).start()
    if sys.argv[2:3] == ["short"]:
        server.default = lambda request: Reply(  # type: ignore[method-assign]
            "ok: " + server.last_user_text(request).split("\n\n")[-1][:40])
    server.requests_keep = 0  # type: ignore[attr-defined]
    print(server.base_url, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())

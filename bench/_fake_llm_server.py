"""Run the test kit's fake OpenAI server in its own process (so benches measure only us).

Prints the base URL on its first line, then serves until killed.
Usage: python bench/_fake_llm_server.py [latency_seconds]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes.llm import FakeLLMServer  # noqa: E402


async def main() -> None:
    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    server = await FakeLLMServer(latency=latency).start()
    server.requests_keep = 0  # type: ignore[attr-defined]
    print(server.base_url, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())

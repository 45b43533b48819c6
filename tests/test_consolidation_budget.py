"""Consolidation through the real gateway on a small window (issue 18, item 4): its answer
budget follows ``maxCompletionTokens`` and, with the provider down, the pre-turn round fails
fast instead of retrying every chunk before the user hears anything."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lucidgate.memory.consolidation_prompt import SYSTEM_PROMPT
from tests.fakes.llm import Fail, FakeLLMServer, Reply
from tests.test_agent_loop import running

WAIT = 60.0
SMALL = {"contextWindowTokens": 2048, "maxCompletionTokens": 300, "safetyBuffer": 0}


def write_long_session(workspace: Path, messages: int = 40) -> None:
    lines: list[dict[str, Any]] = [{"_type": "metadata", "v": 1, "key": "cli:1", "metadata": {},
                                    "last_consolidated": 0}]
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        lines.append({"role": role, "content": f"m{i} " + " ".join(f"w{i}x{j}" for j in range(40))})
    (workspace / "sessions").mkdir(parents=True, exist_ok=True)
    (workspace / "sessions" / "cli_1.jsonl").write_text("".join(json.dumps(m) + "\n" for m in lines))


def is_summary(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == SYSTEM_PROMPT


async def test_summary_answer_budget_follows_max_completion_tokens(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_long_session(workspace)
    fake_llm.default = lambda body: Reply("- a fact" if is_summary(body) else "answer")
    async with running(make_config(agents={"defaults": SMALL})) as (_, channel):
        await channel.say("hello", sender_id="local")
        [reply] = await channel.wait_replies(1, WAIT)
    assert reply.text == "answer"
    summaries = [r for r in fake_llm.requests if is_summary(r)]
    assert summaries and all(r["max_tokens"] == 300 for r in summaries)


async def test_provider_down_pre_turn_consolidation_fails_fast(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    write_long_session(workspace)
    fake_llm.default = lambda body: Fail(503, "model is loading")
    config = make_config(agents={"defaults": {**SMALL, "llmRetries": 2}})
    async with running(config) as (_, channel):
        await channel.say("hello", sender_id="local")
        [reply] = await channel.wait_replies(1, WAIT)
    assert reply.kind == "error"
    summaries = [r for r in fake_llm.requests if is_summary(r)]
    turns = [r for r in fake_llm.requests if not is_summary(r)]
    assert len(summaries) == 1  # no retries, and the round stops at the first failure
    assert len(turns) == 3  # the turn itself still retries (llmRetries = 2)

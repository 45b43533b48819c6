"""A reasoning model's inline ``<think>`` text never reaches a channel, a transcript or history.

The fake LLM answers the way vLLM / llama.cpp / Ollama serve DeepSeek R1 or Qwen3: the
thinking inline in ``content``. Streamed and not, with a tool step in between, and through
``/new``'s archive call into history.jsonl.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from lucidgate.gateway.model.reasoning import strip_thinking, visible_so_far
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_agent_loop import OWNER, running

SECRET = "SECRET-PLAN"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_thinking_stays_out_of_replies_previews_transcript_and_history(
        stream: bool, fake_llm: FakeLLMServer, make_config: Callable, workspace: Path) -> None:
    fake_llm.queue(
        ToolCalls([("list_dir", {"path": "."})], text=f"<think>{SECRET} one</think>Looking."),
        # Long enough that the stream sends many pieces while the block is still open.
        Reply(f"<think>{SECRET} two, " + "and more thought " * 20 + "</think>\n\nThe answer."),
        Reply(f"<think>{SECRET} three</think>- the user said hello"),  # /new's summary
    )
    config = make_config(channels={"cli": {"streaming": stream}},
                         providers={"openai": {"apiBase": fake_llm.base_url, "streamToolCalls": stream}})
    async with running(config) as (gw, ch):
        await ch.say("hello", **OWNER)
        [reply] = await ch.wait_replies(1)
        await ch.say("/new", **OWNER)
        await ch.wait_replies(2)
    assert [bool(r.get("stream")) for r in fake_llm.requests[:2]] == [stream, stream]
    assert reply.text == "The answer."
    shown = [getattr(m, "text", "") for m in ch.sent]
    assert not [t for t in shown if "think" in t or SECRET in t], shown
    if stream:
        assert any(m.kind == "progress" and m.text for m in ch.sent)  # previews were sent
    transcripts = "".join(p.read_text() for p in (workspace / "sessions").glob("*.jsonl*"))
    assert "Looking." in transcripts and "The answer." in transcripts
    assert SECRET not in transcripts and "<think>" not in transcripts
    history = [json.loads(line)["content"] for line in
               (workspace / "memory" / "history.jsonl").read_text().splitlines()]
    assert history == ["- the user said hello"]
    # The model's next request carries its earlier answers without the thinking either.
    assert SECRET not in json.dumps(fake_llm.requests[1]["messages"])


def test_strip_and_stream_rules() -> None:
    assert strip_thinking("<think>a\nb</think>\n\nAnswer") == "Answer"
    assert strip_thinking("<thinking>x</thinking>Hi <think>y</think>there") == "Hi there"
    assert strip_thinking("plan</think>Answer") == "Answer"  # opening tag dropped by the server
    assert strip_thinking("<think>cut off while thinking") == ""
    assert strip_thinking("I think so.") == "I think so." and strip_thinking(None) is None
    assert visible_so_far("<think>half a thou") == ""
    assert visible_so_far("Hello <thi") == "Hello"
    assert visible_so_far("<think>done</think>Hel") == "Hel"

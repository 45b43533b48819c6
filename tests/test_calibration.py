"""Token estimates calibrate themselves against the provider's ``prompt_tokens``.

The fake LLM plays a model whose tokenizer counts 1.3× (or 1.12×) what cl100k counts:
after a few turns the gateway's estimate follows, survives a restart, moves the
consolidation point, and nonsense from the provider is clamped.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from lucidgate.channels.messages import InboundMessage
from lucidgate.gateway.app import Gateway, build_gateway
from lucidgate.gateway.agent.runner import PromptEstimator
from lucidgate.memory import tokens
from lucidgate.memory.calibration import MAX_RATIO, MIN_RATIO, TokenCalibration
from lucidgate.memory.consolidation_prompt import SYSTEM_PROMPT as SUMMARY_PROMPT
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Func, Reply, Scripted

OWNER = dict(sender_id="local")
MODEL = "openai/fake-model"


def request_tokens(body: dict[str, Any]) -> int:
    return tokens.count_messages(body.get("messages") or []) + tokens.count_tools(body.get("tools"))


def tokenizer_counting(ratio: float) -> Func:
    """Answers like a model whose tokenizer counts ``ratio`` × cl100k for every request."""

    def answer(body: dict[str, Any]) -> Scripted:
        summarising = body["messages"][0].get("content") == SUMMARY_PROMPT
        return Reply("- a fact worth keeping" if summarising else "ok",
                     prompt_tokens=round(ratio * request_tokens(body)))

    return Func(answer)


@asynccontextmanager
async def running(config: Any) -> AsyncIterator[tuple[Gateway, FakeChannel]]:
    gw = build_gateway(config)
    channel = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", channel)
    async with gw:
        yield gw, channel


def calibration_of(gw: Gateway) -> TokenCalibration:
    assert gw.parts.model.calibration is not None
    return gw.parts.model.calibration


async def talk(gw: Gateway, ch: FakeChannel, texts: list[str]) -> None:
    for text in texts:
        await ch.say(text, **OWNER)
        await ch.wait_replies(ch.reply_count + 1, timeout=60)
        await calibration_of(gw).settled()


# ----------------------------------------------------------------------------- the module


def test_ratio_is_a_mean_first_then_a_moving_average_and_clamped() -> None:
    cal = TokenCalibration(None)
    assert cal.factor(MODEL) == 1.0 and cal.scale(MODEL, 1000) == 1000
    assert cal.observe(MODEL, 1000, 1300) == pytest.approx(1.3)
    assert cal.observe(MODEL, 1000, 1100) == pytest.approx(1.2)  # mean of 1.3 and 1.1
    for _ in range(30):
        cal.observe(MODEL, 2000, 2240)
    assert cal.factor(MODEL) == pytest.approx(1.12, abs=0.005)  # converges on the new truth
    assert cal.scale(MODEL, 1000) == math.ceil(1000 * cal.factor(MODEL))
    assert cal.factor("openai/other") == 1.0  # per model

    wild = TokenCalibration(None)
    assert wild.observe(MODEL, 1000, 10**9) == MAX_RATIO
    assert (wild.observe(MODEL, 1000, 1) or 0) <= MAX_RATIO
    for _ in range(30):
        wild.observe(MODEL, 1000, 1)
    assert wild.factor(MODEL) == pytest.approx(MIN_RATIO, abs=0.01)
    assert wild.observe(MODEL, 1000, 0) is None  # no usage reported: not a sample
    assert wild.observe(MODEL, 50, 5000) is None  # tiny request: template overhead dominates
    assert wild.factor(MODEL) == pytest.approx(MIN_RATIO, abs=0.01)


async def test_ratio_persists_atomically_and_a_bad_file_starts_uncalibrated(tmp_path: Path) -> None:
    path = tmp_path / "state" / "token_calibration.json"
    cal = TokenCalibration(path)
    await cal.ensure_loaded()
    cal.observe(MODEL, 1000, 1250)
    await cal.save_if_moved(MODEL)
    stored = json.loads(path.read_text())
    assert stored["models"][MODEL] == {"ratio": 1.25, "samples": 1}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind

    again = TokenCalibration(path)
    await again.ensure_loaded()
    assert again.factor(MODEL) == pytest.approx(1.25) and again.samples(MODEL) == 1

    path.write_text('{"models": {"openai/fake-model": {"ratio": 1000}}}')
    clamped = TokenCalibration(path)
    await clamped.ensure_loaded()
    assert clamped.factor(MODEL) == MAX_RATIO  # a hand-edited absurd value is clamped too

    path.write_text("{not json")
    broken = TokenCalibration(path)
    await broken.ensure_loaded()
    assert broken.factor(MODEL) == 1.0
    assert path.read_text() == "{not json"  # left for the user to look at, not clobbered


# ----------------------------------------------------------------------------- the gateway


@pytest.mark.parametrize("ratio", [1.3, 1.12])
async def test_estimate_tracks_the_providers_count_and_survives_a_restart(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, ratio: float
) -> None:
    fake_llm.default = tokenizer_counting(ratio).fn
    # A window small enough that the budget check counts exactly (no byte-bound shortcut).
    config = make_config(agents={"defaults": {"contextWindowTokens": 4096,
                                              "maxCompletionTokens": 500, "safetyBuffer": 0}})
    async with running(config) as (gw, ch):
        assert calibration_of(gw).factor(MODEL) == 1.0
        await talk(gw, ch, ["hello there", "tell me about the weather", "and about cats"])
        assert calibration_of(gw).factor(MODEL) == pytest.approx(ratio, rel=0.03)
        session = await gw.parts.sessions.get("cli:1")
        ctx = gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="",
                                                        role="owner"))
        raw = await PromptEstimator(gw.parts.builder, gw.parts.tools).estimate(session, ctx)
        calibrated = await gw.parts.consolidator._estimate(session)  # what the budget check uses
        assert calibrated == pytest.approx(raw * ratio, rel=0.03)
        would_send = await gw.parts.builder.build(session, ctx)
        provider_count = ratio * (tokens.count_messages(would_send)
                                  + tokens.count_tools(gw.parts.tools.schemas(ctx)))
        assert abs(calibrated - provider_count) < 0.05 * provider_count  # no longer 12-30 % low
    stored = json.loads((workspace / "state" / "token_calibration.json").read_text())
    assert stored["models"][MODEL]["ratio"] == pytest.approx(ratio, rel=0.03)

    requests_before = len(fake_llm.requests)
    async with running(config) as (gw, ch):  # a restart: calibrated before any model call
        session = await gw.parts.sessions.get("cli:1")
        assert await gw.parts.consolidator._estimate(session) == pytest.approx(calibrated, rel=0.01)
        assert calibration_of(gw).factor(MODEL) == pytest.approx(ratio, rel=0.03)
    assert len(fake_llm.requests) == requests_before


@pytest.mark.parametrize(("ratio", "consolidates"), [(1.3, True), (1.0, False)])
async def test_the_budget_holds_for_a_tokenizer_that_counts_more(
    fake_llm: FakeLLMServer, make_config: Callable, ratio: float, consolidates: bool
) -> None:
    """A prompt at ~84 % of the budget by cl100k is ~109 % by a 1.3× tokenizer: once
    calibrated, the gateway consolidates; with a cl100k-like model it does not (84 %, not
    more: the conversation part must also stay under the working set, 3/4 of the budget)."""
    fake_llm.default = tokenizer_counting(ratio).fn
    config = make_config(agents={"defaults": {"contextWindowTokens": 16_000,
                                              "maxCompletionTokens": 1000, "safetyBuffer": 0}})
    budget = config.agent.prompt_budget
    async with running(config) as (gw, ch):
        await talk(gw, ch, ["hello there", "how are you today?"])
        assert calibration_of(gw).factor(MODEL) == pytest.approx(ratio, rel=0.03)
        await gw.parts.agent.idle()  # the background check is scheduled after the reply
        await gw.parts.consolidator.drain()
        session = await gw.parts.sessions.get("cli:1")
        ctx = gw.parts.agent.context_for(InboundMessage(channel="cli", chat_id="1", sender_id="local", text="",
                                                        role="owner"))
        raw = await PromptEstimator(gw.parts.builder, gw.parts.tools).estimate(session, ctx)
        filler_tokens = int(0.84 * budget) - raw - 40
        filler = " ".join(f"item{i % 97}" for i in range(filler_tokens))
        filler = tokens.encoding().decode(tokens.encoding().encode(filler)[:filler_tokens])
        summaries_before = sum(1 for r in fake_llm.requests if r["messages"][0]["content"] == SUMMARY_PROMPT)
        assert summaries_before == 0
        await talk(gw, ch, [filler])
        await gw.parts.agent.idle()  # the background check is scheduled after the reply
        await gw.parts.consolidator.drain()
        raw_after = await PromptEstimator(gw.parts.builder, gw.parts.tools).estimate(session, ctx)
        summaries = sum(1 for r in fake_llm.requests if r["messages"][0]["content"] == SUMMARY_PROMPT)
    assert (summaries > 0) is consolidates, (raw, raw_after, budget)
    if not consolidates:
        assert 0.8 * budget < raw_after < budget  # the control really was close to the edge


async def test_calibration_is_learned_in_the_background_and_never_breaks_a_call(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    """A state dir that cannot be written costs the calibration its persistence, not the turn."""
    (workspace / "state").mkdir(parents=True, exist_ok=True)
    (workspace / "state" / "token_calibration.json").mkdir()  # a directory where the file goes
    fake_llm.default = tokenizer_counting(1.3).fn
    async with running(make_config()) as (gw, ch):
        await ch.say("hello", **OWNER)
        [reply] = await ch.wait_replies(1, timeout=60)
        await asyncio.wait_for(calibration_of(gw).settled(), 10)
        assert getattr(reply, "text", None) == "ok"
        assert calibration_of(gw).factor(MODEL) == pytest.approx(1.3, rel=0.03)

"""Streaming everywhere: webhook server-sent events over real HTTP, Slack placeholder edits
against the loopback Slack API, and the tool step named in the progress line.

The fake LLM holds its answer after the first streamed piece (``HeldReply``) until the test
has seen that piece arrive, so "a preview came before the answer" is shown by order of
events, never by timing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lucidgate.channels.messages import OutboundProgress, OutboundText, Target
from lucidgate.channels.slack import SlackChannel, SlackSettings
from tests.fakes.llm import FakeLLMServer, HeldReply, ToolCalls
from tests.fakes.slack_api import FakeSlackAPI
from tests.test_webhook import AUTH, OWNER_AUTH, body, serving, transcript, wh_config  # noqa: F401  (fixture)

ANSWER = "The answer is forty-two, as always."


def streaming_config(wh_config: Callable[..., Any], fake_llm: FakeLLMServer, **webhook: Any) -> Any:
    # The fake server streams tool calls as OpenAI does; tell the client so.
    return wh_config({"owners": ["boss"], **webhook},
                     providers={"openai": {"apiBase": fake_llm.base_url, "streamToolCalls": True}})


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: ") and event is not None:
            yield event, json.loads(line.removeprefix("data: "))
            event = None


async def test_webhook_streams_activity_then_progress_then_the_reply(wh_config, fake_llm: FakeLLMServer,
                                                                      workspace: Path) -> None:
    release = threading.Event()
    fake_llm.queue(ToolCalls([("list_dir", {"path": "."})]), HeldReply(ANSWER, release))
    seen: list[tuple[str, dict[str, Any]]] = []
    async with serving(streaming_config(wh_config, fake_llm), OWNER_AUTH) as (_, client):
        async with client.stream("POST", "/v1/messages", json=body("what is it?", sender="boss", stream=True)) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            async for event, data in sse_events(r):
                seen.append((event, data))
                if event == "progress":
                    release.set()  # the first piece is on the wire; let the rest come
                if event in ("reply", "error"):
                    break
    kinds = [e for e, _ in seen]
    assert ("activity", {"text": "running list_dir…"}) in seen
    assert kinds.index("activity") < kinds.index("progress") < kinds.index("reply")
    first_preview = next(d["text"] for e, d in seen if e == "progress")
    assert ANSWER.startswith(first_preview) and first_preview != ANSWER
    final = seen[-1]
    assert final[0] == "reply" and final[1]["reply"] == ANSWER and final[1]["error"] is False
    assert final[1]["session"] == "webhook:c1"
    assert transcript(workspace, "webhook:c1")[-1] == {**transcript(workspace, "webhook:c1")[-1],
                                                       "role": "assistant", "content": ANSWER}
    assert fake_llm.requests[-1].get("stream") is True


async def test_stream_needs_wait_and_plain_requests_are_unchanged(wh_config, fake_llm: FakeLLMServer) -> None:
    release = threading.Event()
    release.set()
    fake_llm.queue(HeldReply("plain answer", release))
    async with serving(streaming_config(wh_config, fake_llm), OWNER_AUTH) as (_, client):
        refused = await client.post("/v1/messages", json=body(stream=True, wait=False))
        plain = await client.post("/v1/messages", json=body("hi", sender="boss"))
    assert refused.status_code == 422 and "stream=true needs wait=true" in refused.text
    assert plain.status_code == 200 and plain.json()["reply"] == "plain answer"
    assert plain.headers["content-type"].startswith("application/json")


async def test_webhook_stream_that_outlives_the_wait_ends_with_an_error_event(
        wh_config, fake_llm: FakeLLMServer) -> None:
    release = threading.Event()
    fake_llm.queue(HeldReply("too late", release))
    events: list[tuple[str, dict[str, Any]]] = []
    try:
        async with serving(streaming_config(wh_config, fake_llm, waitTimeoutS=1), OWNER_AUTH) as (_, client):
            async with client.stream("POST", "/v1/messages", json=body(sender="boss", stream=True)) as r:
                events = [item async for item in sse_events(r)]
    finally:
        release.set()
    event, data = events[-1]
    assert event == "error" and data["status"] == 504
    assert "no answer within 1s" in data["detail"] and data["session"] == "webhook:c1"


# ----------------------------------------------------------------------------- Slack
@pytest.fixture
async def slack_api() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as api:
        yield api


@pytest.fixture
async def slack(make_config: Callable[..., Any], slack_api: FakeSlackAPI,
                workspace: Path) -> AsyncIterator[Callable[..., Any]]:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.channels.inbox import InboxJournal

    bus = MessageBus(inbox=InboxJournal(workspace / "state" / "inbox.jsonl"))
    started: list[SlackChannel] = []

    async def build(**section: Any) -> SlackChannel:
        cfg = make_config(channels={"slack": {
            "enabled": True, "botToken": slack_api.bot_token, "appToken": slack_api.app_token,
            "signingSecret": "s" * 32, "apiBase": slack_api.base_url, "mode": "http",
            "allowFrom": ["U_ALICE"], **section}})
        channel = SlackChannel(SlackSettings.from_section(cfg.channels.slack, api_timeout_s=5.0), bus,
                               workspace=workspace)
        await channel.start()
        started.append(channel)
        return channel

    await bus.start()
    yield build
    for channel in started:
        await channel.stop()
    await bus.stop()


def dm_target() -> Target:
    return Target("slack", "D_ALICE", thread_id=None, reply_to="1700000001.000100")


async def test_slack_placeholder_is_posted_once_edited_and_replaced_by_the_answer(
        slack: Callable[..., Any], slack_api: FakeSlackAPI) -> None:
    channel = await slack(streaming=True)
    assert channel.previews is not None
    channel.previews.interval_s = 0  # every different preview is an edit: no clock in the test
    await channel.send(OutboundProgress(dm_target(), "", activity="running grep…"))
    await channel.send(OutboundProgress(dm_target(), "The ans"))
    await channel.send(OutboundProgress(dm_target(), "The ans"))  # unchanged: no call
    await channel.send(OutboundText(dm_target(), "The **answer**", in_reply_to="1700000001.000100"))
    (placeholder,) = slack_api.calls_to("chat.postMessage")
    assert placeholder.params["blocks"] == [{"type": "markdown", "text": "_running grep…_"}]
    assert placeholder.params["text"] == "running grep…"
    updates = slack_api.calls_to("chat.update")
    assert [u.params["blocks"][0]["text"] for u in updates] == ["The ans", "The **answer**"]
    assert [u.params["text"] for u in updates] == ["The ans", "The answer"]
    assert {u.params["channel"] for u in updates} == {"D_ALICE"}
    assert len({u.params["ts"] for u in updates}) == 1


async def test_slack_answer_is_posted_anew_when_the_placeholder_is_gone(
        slack: Callable[..., Any], slack_api: FakeSlackAPI) -> None:
    channel = await slack(streaming=True)
    await channel.send(OutboundProgress(dm_target(), "partial"))
    slack_api.fail_next("chat.update", status=200, error="message_not_found", retry_after=None)
    await channel.send(OutboundText(dm_target(), "final", in_reply_to="1700000001.000100"))
    assert [c.params["text"] for c in slack_api.calls_to("chat.postMessage")] == ["partial", "final"]


async def test_slack_without_streaming_posts_only_the_answer(
        slack: Callable[..., Any], slack_api: FakeSlackAPI) -> None:
    channel = await slack()
    assert channel.previews is None
    await channel.send(OutboundProgress(dm_target(), "partial", activity="running grep…"))
    await channel.send(OutboundText(dm_target(), "final", in_reply_to="1700000001.000100"))
    assert [c.params["text"] for c in slack_api.calls_to("chat.postMessage")] == ["final"]
    assert slack_api.calls_to("chat.update") == []


# ----------------------------------------------------------------------------- web console
async def test_web_console_shows_the_tool_step_and_keeps_the_preview(workspace: Path) -> None:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.channels.web.channel import WebChannel
    from lucidgate.gateway.console.api_chat import _sse

    channel = WebChannel(MessageBus(), workspace=workspace)
    sub = await channel.subscribe("tab-1", 0)
    target = Target("web", "tab-1", reply_to="m1")
    await channel.send(OutboundProgress(target, "", activity="running grep…"))
    await channel.send(OutboundProgress(target, "Half an ans"))
    first, second = await sub.next(), await sub.next()
    assert (first.kind, first.text) == ("activity", "running grep…")
    assert (second.kind, second.text) == ("progress", "Half an ans")
    assert _sse(first) == 'event: activity\ndata: {"text": "running grep…"}\n\n'
    assert sub.queue.empty()  # an activity never blanks the preview with an empty progress


# ----------------------------------------------------------------------------- typed delivery errors
async def test_web_and_openai_channels_raise_the_outbox_typed_errors(workspace: Path) -> None:
    import pytest as _pytest

    from lucidgate.channels._ratelimit import DeliveryFailed, DeliveryRetry
    from lucidgate.channels.bus import MessageBus
    from lucidgate.channels.openai import OpenAIChannel
    from lucidgate.channels.web.channel import WebChannel
    from lucidgate.config.schema import OpenAIApiConfig

    openai = OpenAIChannel(OpenAIApiConfig(), MessageBus(), token="t" * 32)
    with _pytest.raises(DeliveryFailed) as failed:
        await openai.send(OutboundText(Target("openai", "s1"), "nobody asked", in_reply_to="gone"))
    assert failed.value.permanent and "stays in the session transcript" in str(failed.value)

    web = WebChannel(MessageBus(), workspace=workspace)
    sub = await web.subscribe("tab-1", 0)
    log_dir = workspace / "state" / "web"
    log_dir.parent.mkdir(parents=True, exist_ok=True)
    log_dir.write_text("in the way")  # the chat log's folder cannot be made: a disk problem
    with _pytest.raises(DeliveryRetry, match="could not write the web chat log"):
        await web.send(OutboundText(Target("web", "tab-1"), "an answer", in_reply_to="m1"))
    log_dir.unlink()
    await web.send(OutboundText(Target("web", "tab-1"), "an answer", in_reply_to="m1"))  # the retry
    first = await sub.next()
    assert first.event is not None and first.event.text == "an answer"
    assert sub.queue.empty()  # shown once, although delivered twice
    assert (log_dir / "tab-1.jsonl").read_text().count("an answer") == 1

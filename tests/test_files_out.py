"""Files out: the ``message`` tool attaches workspace files; the outbox keeps them across a restart.

The tool runs through the real agent loop (litellm over HTTP to the fake LLM); the delivery
side runs the real python-telegram-bot against the loopback Bot API stand-in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lucidgate.channels.messages import OutboundText, Target
from lucidgate.channels.outbox import Outbox, decode, encode
from lucidgate.channels.outfiles import MAX_FILE_BYTES
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.test_agent_loop import OWNER, running
from tests.test_outbox import OWNER as TG_OWNER, Rig, rig, tg  # noqa: F401 (fixtures)
from tests.waiting import until


def tool_results(fake_llm: FakeLLMServer) -> list[str]:
    return [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]


async def test_the_message_tool_attaches_a_workspace_file(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path
) -> None:
    (workspace / "out").mkdir()
    (workspace / "out" / "report.pdf").write_bytes(b"%PDF-1.4 tiny")
    fake_llm.queue(ToolCalls([("message", {"text": "here it is", "files": ["out/../out/report.pdf"]})]),
                   Reply("done"))
    async with running(make_config()) as (gw, ch):
        await ch.say("send me the report", **OWNER)
        await ch.wait_replies(2)
    [with_file] = [m for m in ch.replies() if isinstance(m, OutboundText) and m.files]
    assert with_file.files == ("out/report.pdf",) and with_file.text == "here it is"
    assert tool_results(fake_llm) == ["sent to cli:1 with 1 file(s)"]


async def test_paths_outside_the_workspace_internal_or_too_big_are_refused_with_a_reason(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.symlink(outside, workspace / "link.txt")
    with open(workspace / "big.bin", "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: no real bytes written
    calls = [("message", {"text": "x", "files": [f]})
             for f in ("../outside.txt", "link.txt", str(outside), "state/outbox.sqlite", "big.bin", "nope.txt")]
    fake_llm.queue(ToolCalls(calls), Reply("ok"))
    async with running(make_config()) as (gw, ch):
        await ch.say("send files", **OWNER)
        await ch.wait_replies(1)
    assert not [m for m in ch.replies() if isinstance(m, OutboundText) and m.files]
    results = tool_results(fake_llm)
    assert len(results) == 6
    assert all("outside the workspace" in r for r in results[:3]), results
    assert "internal gateway state" in results[3]
    assert "10.5 MB; files up to 10 MB can be sent" in results[4]
    assert "does not exist" in results[5]


def test_outbox_rows_keep_their_files_and_old_rows_still_decode() -> None:
    msg = OutboundText(Target("telegram", "1"), "hi", files=("a.txt", "b/c.png"), delivery_id="d")
    assert decode(encode(msg)) == msg
    old = '{"kind": "text", "text": "hi", "in_reply_to": null, "delivery_id": "d", "plain": false, ' \
          '"target": {"channel": "telegram", "chat_id": "1", "thread_id": null, "reply_to": null}}'
    assert decode(old).files == ()


async def test_a_reply_with_a_file_queued_during_an_outage_arrives_after_a_restart(
    rig: Rig, tg: FakeTelegramAPI, workspace: Path  # noqa: F811
) -> None:
    (workspace / "chart.png").write_bytes(b"\x89PNG fake image bytes")
    (workspace / "notes.txt").write_bytes(b"plain notes\n")
    bus = await rig.up()
    tg.set_outage("500")
    await bus.publish_outbound(OutboundText(Target("telegram", str(TG_OWNER)), "your files",
                                            files=("chart.png", "notes.txt")))
    await until(lambda: len(tg.calls_to("sendMessage")) >= 2)
    await rig.down()
    outbox = Outbox(workspace / "state" / "outbox.sqlite", deadlines_s={"telegram": 24 * 3600.0})
    assert [i.msg.files for i in outbox.pending("telegram")] == [("chart.png", "notes.txt")]
    tg.set_outage(None)
    bus = await rig.up()
    await until(lambda: rig.counts()["delivered"] == 1)
    assert [m["text"] for m in tg.messages.values() if "text" in m] == ["your files"]
    [photo] = tg.calls_to("sendPhoto")
    [doc] = tg.calls_to("sendDocument")
    assert tg.uploads[(photo.params["chat_id"], "chart.png")] == b"\x89PNG fake image bytes"
    assert tg.uploads[(doc.params["chat_id"], "notes.txt")] == b"plain notes\n"


async def test_another_agents_reply_sends_its_own_files_after_a_restart_and_none_of_the_default_agents(
    rig: Rig, tg: FakeTelegramAPI, workspace: Path, tmp_path: Path  # noqa: F811
) -> None:
    """Issue 41: a reply of agent "work" names files in work's workspace; the outbox keeps
    whose reply it is across a restart, and the channel (whose own workspace is the default
    agent's) sends work's file, refuses a path leading into the default agent's workspace and
    sends nothing for an agent that no longer runs."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "plan.txt").write_bytes(b"work plan\n")
    (workspace / "secret.txt").write_bytes(b"home secret\n")
    roots = {"work": work}
    bus = await rig.up(agent_workspaces=roots)
    tg.set_outage("500")
    await bus.publish_outbound(OutboundText(Target("telegram", str(TG_OWNER)), "work's files", agent="work",
                                            files=("plan.txt", f"../{workspace.name}/secret.txt", "secret.txt")))
    await until(lambda: len(tg.calls_to("sendMessage")) >= 1)
    await rig.down()
    tg.set_outage(None)
    bus = await rig.up(agent_workspaces=roots)
    await until(lambda: rig.counts()["delivered"] == 1)
    [doc] = tg.calls_to("sendDocument")
    assert tg.uploads[(doc.params["chat_id"], "plan.txt")] == b"work plan\n"
    [text] = [m["text"] for m in tg.messages.values() if "text" in m]
    assert text.startswith("work's files") and "secret.txt is outside the workspace" in text
    assert "secret.txt no longer exists" in text  # "secret.txt" is looked for in work's workspace only
    assert b"home secret\n" not in tg.uploads.values()

    await bus.publish_outbound(OutboundText(Target("telegram", str(TG_OWNER)), "gone", agent="gone",
                                            files=("plan.txt",)))
    await until(lambda: rig.counts()["delivered"] == 2)
    assert len(tg.calls_to("sendDocument")) == 1
    assert any("does not run here" in m.get("text", "") for m in tg.messages.values())


def test_an_agents_outbox_rows_keep_whose_reply_they_are() -> None:
    msg = OutboundText(Target("telegram", "1"), "hi", files=("a.txt",), delivery_id="d", agent="work")
    assert decode(encode(msg)) == msg and '"agent"' not in encode(OutboundText(Target("telegram", "1"), "hi"))


async def test_channels_without_files_name_them_in_the_text(workspace: Path) -> None:
    from lucidgate.channels.bus import MessageBus
    from lucidgate.channels.cli import CliChannel
    from lucidgate.channels.web.channel import WebChannel

    shown: list[str] = []
    cli = CliChannel(MessageBus(), on_unsolicited=shown.append)
    await cli.send(OutboundText(Target("cli", "local"), "the chart", files=("out/chart.png",)))
    assert shown == ["the chart\n\n(file not sent: out/chart.png: the terminal channel cannot carry files; "
                     "it stays in the workspace)"]

    web = WebChannel(MessageBus(), workspace=workspace)
    sub = await web.subscribe("tab-1", 0)
    await web.send(OutboundText(Target("web", "tab-1"), "the chart", files=("out/chart.png",)))
    event = await sub.next()
    assert event.event is not None and event.event.text.endswith(
        "(file not sent: out/chart.png: the web channel cannot carry files; it stays in the workspace)")

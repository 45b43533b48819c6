"""The interactive terminal (`lucid agent`) in a real pseudo-terminal, driven by pexpect.

The fake LLM runs on its own thread (the CLI is another process); pexpect reads what a
person would see and types what they would type: Enter, the Up arrow, Ctrl-C.
"""

from __future__ import annotations

import json
import re
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.fakes.llm import FakeLLMServer, Hang, HeldReply, Reply, ToolCalls
from tests.test_cli import write_config

pytestmark = pytest.mark.slow

PROMPT = "you ›"
LABEL = "lucid ›"


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


def spawn(tmp_path: Path, llm: FakeLLMServer, *, stream_tool_calls: bool = False) -> pexpect.spawn:
    config = write_config(tmp_path / "config.json", tmp_path / "ws", llm.base_url)
    if stream_tool_calls:  # the fake server streams tool calls as OpenAI does
        doc = json.loads(config.read_text())
        doc["providers"]["openai"]["streamToolCalls"] = True
        config.write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    env.update(HOME=str(tmp_path), TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", COLUMNS="120")
    child = pexpect.spawn(sys.executable, ["-c", "from lucidgate.gateway.cli import main; main()", "agent", "-c",
                                           str(config)], env=env, encoding="utf-8", timeout=90,
                          dimensions=(40, 120))
    child.expect_exact(PROMPT)
    return child


def wait_requests(llm: FakeLLMServer, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(llm.requests) < count:
        assert time.monotonic() < deadline, f"only {len(llm.requests)} LLM request(s) arrived"
        time.sleep(0.02)


def test_answers_are_labelled_markdown_and_history_recalls_a_line(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.queue(Reply("**Hello** there\n\n- one\n- two"), Reply("again"))
    child = spawn(tmp_path, llm)
    child.sendline("hello")
    child.expect_exact(LABEL)
    child.expect(r"Hello(\x1b\[[0-9;]*m)* there")  # styled by markdown: bold, not literal asterisks
    child.expect_exact(PROMPT)
    assert "**" not in (child.before or "") and "one" in (child.before or "")
    child.send("\x1b[A")  # Up: the last line comes back for editing
    child.send("\r")
    child.expect_exact("again")
    child.expect_exact(PROMPT)
    user_turns = [r["messages"][-1]["content"] for r in llm.requests]
    assert user_turns[0].endswith("hello") and user_turns[1].endswith("hello")
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (tmp_path / "ws" / "state" / "terminal_history").read_text().count("hello") >= 1


def test_ctrl_c_stops_the_answer_and_comes_back_to_the_prompt(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.queue(Hang(60), Reply("after the stop"))
    child = spawn(tmp_path, llm)
    child.sendline("write me a long story")
    wait_requests(llm, 1)
    child.sendintr()
    child.expect_exact("stopped")
    child.expect_exact(PROMPT)
    child.sendline("are you there?")
    child.expect_exact("after the stop")
    child.expect_exact(PROMPT)
    transcript = (tmp_path / "ws" / "sessions" / "cli_local.jsonl").read_text()
    assert "write me a long story" in transcript and '"status": "cancelled"' in transcript.replace('":"', '": "')
    child.sendintr()  # at the prompt: leave at once
    child.expect(pexpect.EOF, timeout=30)
    child.close()
    assert child.exitstatus == 0
    assert "Traceback" not in (child.before or "")


def test_warnings_go_to_the_log_file_not_between_the_lines(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.queue(Reply("fine"))
    child = spawn(tmp_path, llm)
    logging_probe = tmp_path / "ws" / "skills" / "broken" / "SKILL.md"
    logging_probe.parent.mkdir(parents=True)
    logging_probe.write_bytes(b"---\nname: [unclosed\n---\nbody\n")  # a malformed skill logs a warning
    child.sendline("hi")
    child.expect_exact("fine")
    child.expect_exact(PROMPT)
    seen = child.before or ""
    child.sendline("exit")
    child.expect(pexpect.EOF)
    child.close()
    assert "WARNING" not in seen
    log = tmp_path / "ws" / "logs" / "agent.log"
    assert "WARNING" in log.read_text()  # the warning happened, in the file


def test_the_answer_streams_in_and_a_tool_step_is_named(tmp_path: Path, llm: FakeLLMServer) -> None:
    release = threading.Event()
    answer = "Streaming works: the *whole* answer arrives."
    llm.queue(ToolCalls([("list_dir", {"path": "."})]), HeldReply(answer, release))
    child = spawn(tmp_path, llm, stream_tool_calls=True)
    try:
        child.sendline("show me")
        child.expect_exact("running list_dir…")
        child.expect_exact(answer[:8])  # the first streamed piece, while the rest is held back
        assert "whole" not in (child.before or "")
        release.set()
        child.expect_exact(LABEL)
        child.expect(r"the (\x1b\[[0-9;]*m)*whole(\x1b\[[0-9;]*m)* answer arrives")  # rendered at the end
        child.expect_exact(PROMPT)
    finally:
        release.set()
    assert llm.requests[-1].get("stream") is True
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_sessions_and_switch_change_the_conversation_mid_chat(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.queue(Reply("answered in local"), Reply("answered in work"))
    child = spawn(tmp_path, llm)
    child.sendline("hello")
    child.expect_exact("answered in local")
    child.expect_exact(PROMPT)
    child.sendline("/switch work")
    child.expect_exact("Switched to a new session work.")
    child.expect_exact(PROMPT)
    child.sendline("hi there")
    child.expect_exact("answered in work")
    child.expect_exact(PROMPT)
    child.sendline("/sessions")
    child.expect(r"\* work +2 message\(s\)")
    child.expect(r" local +2 message\(s\)")
    child.expect_exact(PROMPT)
    child.sendline("/switch local")
    child.expect_exact("Switched to session local (2 message(s)).")
    child.expect_exact(PROMPT)
    child.sendline("/switch ../x")
    child.expect_exact("invalid session name '../x'")
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert len(llm.requests) == 2  # the terminal answered /sessions and /switch itself
    sessions = tmp_path / "ws" / "sessions"
    assert "hi there" in (sessions / "cli_work.jsonl").read_text()
    local = (sessions / "cli_local.jsonl").read_text()
    assert "hello" in local and "hi there" not in local


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_command_reply_keeps_its_lines_and_placeholders(tmp_path: Path, llm: FakeLLMServer) -> None:
    child = spawn(tmp_path, llm)
    child.sendline("/help")
    child.expect_exact(LABEL)
    child.expect_exact("Anything else is a message")
    lines = [ANSI.sub("", line).strip() for line in (child.before or "").splitlines()]
    assert "/dream-restore <sha> — undo a memory change" in lines  # its own line, <sha> shown
    assert "/help — list commands" in lines and "Commands:" in lines
    child.expect_exact(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert llm.requests == []  # a command never calls the model


def test_help_in_the_terminal_also_names_its_own_commands(tmp_path: Path, llm: FakeLLMServer) -> None:
    child = spawn(tmp_path, llm)
    child.sendline("/help")
    child.expect_exact("/status")  # the assistant's own list (a command: no model call)
    child.expect_exact("/sessions")
    child.expect_exact("/switch NAME")
    child.expect_exact(PROMPT)
    assert llm.requests == []
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()

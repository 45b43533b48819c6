"""Dream (DESIGN §5.3) through the real LLM path: the gateway's litellm runner -> fake server.

Every scenario scripts the fake OpenAI server (phase 1 answer, then phase 2 tool calls) and
checks the outcome where a user would: the files, the cursor, the git log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucidgate.config.schema import Config
from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.gateway.agent.toolloop import ModelToolLoop
from lucidgate.memory.dream import Dream, DreamReport
from lucidgate.memory.errors import DreamBusy
from lucidgate.memory.gitstore import GitStore
from lucidgate.memory.store import MemoryStore
from tests.fakes.llm import Fail, FakeLLMServer, Hang, Reply, ToolCalls

USER = "# User\n\n- Name: Ana\n- Lives in Lisbon\n- Drinks tea\n"
MEMORY = ("# Memory\n\n- Project lucid uses Python 3.11\n- Trip to Rome on 2026-01-10\n"
          "- Weekly report is due on Fridays\n- Ana's team has 5 people\n- Standup at 09:30\n")
SOUL = "# Soul\n\nCalm and brief.\n"
OWNER = "telegram:1"
GROUP = "telegram:-100"
SKILL = ("---\nname: weekly-report\ndescription: Gather tickets, summarise, email the team\n---\n\n"
         "1. Gather this week's closed tickets.\n2. Summarise them.\n3. Email the team.\n")


class Env:
    def __init__(self, workspace: Path, config: Config, fake: FakeLLMServer) -> None:
        self.workspace = workspace
        self.config = config
        self.fake = fake
        self.store = MemoryStore(workspace, max_history_entries=config.agent.memory.max_history_entries,
                                 timezone=config.agent.timezone)
        self.git = GitStore(workspace)
        self.dream = self.new_dream()

    def new_dream(self) -> Dream:
        model = LiteLLMChatModel(self.config)
        return Dream(self.store, self.git, model, workspace=self.workspace, config=self.config.agent,
                     tool_loop=ModelToolLoop(model))

    def read(self, rel: str) -> str:
        return (self.workspace / rel).read_text()

    def messages(self) -> list[str]:
        return [c.message for c in self.git.log(50)]

    def request_text(self, index: int) -> str:
        return "\n".join(str(m.get("content") or "") for m in self.fake.requests[index]["messages"])

    def tool_results(self, index: int) -> list[str]:
        return [m["content"] for m in self.fake.requests[index]["messages"] if m.get("role") == "tool"]


@pytest.fixture
def make_env(workspace: Path, fake_llm: FakeLLMServer, make_config: Callable[..., Config]):
    async def build(*, dream: dict[str, Any] | None = None, memory: dict[str, Any] | None = None,
                    history: list[tuple[str, str]] | None = None,
                    defaults: dict[str, Any] | None = None) -> Env:
        (workspace / "memory").mkdir(exist_ok=True)
        (workspace / "USER.md").write_text(USER)
        (workspace / "SOUL.md").write_text(SOUL)
        (workspace / "memory" / "MEMORY.md").write_text(MEMORY)
        (workspace / "AGENTS.md").write_text("# Agents\n")
        (workspace / "sessions").mkdir(exist_ok=True)
        (workspace / "sessions" / "telegram_1.jsonl").write_text("{}\n")
        config = make_config(agents={"defaults": {"llmRetries": 0, "dream": dream or {},
                                                  "memory": memory or {}, **(defaults or {})}})
        env = Env(workspace, config, fake_llm)
        await env.git.ainit()
        for content, key in history or []:
            # Provenance as the consolidator records it: the group's entry is a guest's.
            source = {OWNER: ("private", True), GROUP: ("group", False)}.get(key)
            if source is None:
                await env.store.append_history(content, session_key=key)
            else:
                await env.store.append_history(content, session_key=key, channel="telegram",
                                               chat_type=source[0], owner=source[1])
        return env

    return build


HISTORY = [
    ("- Ana moved from Lisbon to Porto last week", OWNER),
    ("- Ana asked again for the weekly report: gather tickets, summarise, email the team", OWNER),
    ("- Someone in the group said the pizza place closed", GROUP),
]


def snapshot(workspace: Path) -> dict[str, bytes]:
    """Every file a Dream must not touch when it refuses (memory files, skills, others)."""
    skip = {".git", ".dream_cursor", ".history.lock", ".git.lock", ".dream.lock", "history.jsonl",
            ".cursor"}
    return {str(p.relative_to(workspace)): p.read_bytes() for p in sorted(workspace.rglob("*"))
            if p.is_file() and not (set(p.relative_to(workspace).parts) & skip)}


# ----------------------------------------------------------------------------- the happy path

async def test_dream_edits_user_removes_stale_memory_creates_a_skill_and_can_be_undone(make_env) -> None:
    env = await make_env(history=HISTORY)
    (env.workspace / "SOUL.md").write_text("# Soul\n\nCalm, brief and a little funny.\n")  # hand edit
    env.fake.queue(
        Reply("Here is what I found:\n"
              "[USER] Ana now lives in Porto (moved from Lisbon)\n"
              "[FILE-REMOVE] memory/MEMORY.md: - Trip to Rome on 2026-01-10 (stale)\n"
              "- [SKILL] weekly-report: gather tickets, summarise, email the team\n"
              "[MOOD] cheerful\n"
              "[SKILL] Not A Valid Name\n"
              "[SKIP]\n"),
        ToolCalls([
            ("edit_file", {"path": "USER.md", "old_text": "- Lives in Lisbon",
                           "new_text": "- Lives in Porto (moved from Lisbon)"}),
            ("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Trip to Rome on 2026-01-10\n",
                           "new_text": ""}),
            ("write_file", {"path": "skills/weekly-report/SKILL.md", "content": SKILL}),
        ]),
        Reply("Applied three findings."),
    )
    report = await env.dream.run()

    assert report.error is None and report.stop_reason == "done"
    assert report.processed == (1, 3)
    assert report.findings == [
        "[USER] Ana now lives in Porto (moved from Lisbon)",
        "[FILE-REMOVE] memory/MEMORY.md: - Trip to Rome on 2026-01-10 (stale)",
        "[SKILL] weekly-report: gather tickets, summarise, email the team",
        "[SKIP]",
    ]
    assert report.changes == ["edited USER.md", "edited memory/MEMORY.md",
                              "created skills/weekly-report/SKILL.md"]
    assert env.read("USER.md") == USER.replace("- Lives in Lisbon", "- Lives in Porto (moved from Lisbon)")
    assert env.read("memory/MEMORY.md") == MEMORY.replace("- Trip to Rome on 2026-01-10\n", "")
    assert env.read("skills/weekly-report/SKILL.md") == SKILL
    assert env.store.dream_cursor() == 3
    assert env.store.dream_cursor_path.read_text().strip() == "3"
    assert report.tokens > 0

    # Git: the hand edit first, then exactly one dream commit holding only Dream's changes.
    log = env.git.log()
    assert [c.message.split(",")[0][:6] for c in log] == ["dream:", "manual", "init: "]
    dream_commits = [c for c in log if c.message.startswith("dream:")]
    assert len(dream_commits) == 1 and dream_commits[0].sha == report.commit
    assert re.fullmatch(r"dream: \d{4}-\d\d-\d\d \d\d:\d\d, 3 change\(s\)", dream_commits[0].message)
    assert set(dream_commits[0].files) == {"USER.md", "memory/MEMORY.md",
                                           "skills/weekly-report/SKILL.md"}
    assert log[1].message == "manual: SOUL.md"

    # The LLM saw what it needed: phase 1 without tools, phase 2 with exactly three tools.
    assert len(env.fake.requests) == 3
    assert "tools" not in env.fake.requests[0]
    phase1 = env.request_text(0)
    assert "Ana moved from Lisbon to Porto" in phase1 and "Trip to Rome on 2026-01-10" in phase1
    assert "pizza place" not in phase1  # the group's entry never reaches the editing model
    assert re.search(r"#1 · .* · telegram:1\n", phase1)
    assert report.history_only == [3] and "Kept as history only" in report.summary()
    assert {t["function"]["name"] for t in env.fake.requests[1]["tools"]} == \
        {"read_file", "edit_file", "write_file"}
    assert "[MOOD]" not in env.request_text(1)  # dropped findings never reach phase 2
    assert all(r.startswith("OK") for r in env.tool_results(2))
    assert "3 change(s)" in report.summary()

    # Undo the whole Dream with one restore.
    await env.git.arestore(report.commit)
    assert env.read("USER.md") == USER
    assert env.read("memory/MEMORY.md") == MEMORY
    assert not (env.workspace / "skills" / "weekly-report" / "SKILL.md").exists()
    assert env.read("SOUL.md") == "# Soul\n\nCalm, brief and a little funny.\n"  # the hand edit stays
    assert env.messages()[0] == f"restore: before {report.commit[:8]}"


async def test_nothing_new_means_no_llm_call(make_env) -> None:
    env = await make_env()
    report = await env.dream.run()
    assert env.fake.requests == []
    assert report.processed is None and report.stop_reason == "nothing to do"
    assert "nothing new" in report.summary().lower()
    # After a processed batch, the next run is free too.
    await env.store.append_history("- a fact", session_key=OWNER)
    env.fake.queue(Reply("[SKIP]"))
    await env.dream.run()
    assert len(env.fake.requests) == 1
    again = await env.dream.run()
    assert len(env.fake.requests) == 1 and again.processed is None
    assert env.messages() == ["init: memory files"]


async def test_garbage_phase1_output_changes_nothing_but_moves_the_cursor(make_env) -> None:
    env = await make_env(history=HISTORY)
    before = snapshot(env.workspace)
    env.fake.queue(Reply("Sure! I looked at everything.\nNo changes needed, I think.\n"
                         "[NOTE] something\nUSER: Ana likes tea\n[USER]\n[SKILL] missing colon"))
    report = await env.dream.run()
    assert report.findings == [] and report.changes == [] and report.commit is None
    assert report.error is None
    assert len(env.fake.requests) == 1  # no phase 2 without actionable findings
    assert env.store.dream_cursor() == 3
    assert snapshot(env.workspace) == before
    assert env.messages() == ["init: memory files"]


# ----------------------------------------------------------------------------- guards

async def test_phase2_refuses_paths_rewrites_and_bad_edits(make_env, tmp_path: Path) -> None:
    env = await make_env(history=HISTORY, memory={"maxMemoryChars": 400})
    (env.workspace / "skills" / "existing").mkdir(parents=True)
    (env.workspace / "skills" / "existing" / "SKILL.md").write_text(
        "---\nname: existing\ndescription: already here\n---\n")
    await env.git.acommit("setup: skill")
    before = snapshot(env.workspace)
    outside = tmp_path / "outside.md"
    env.fake.queue(
        Reply("[MEMORY] Ana's team grew to 6 people"),
        ToolCalls([
            ("edit_file", {"path": "config.json", "old_text": "a", "new_text": "b"}),
            ("edit_file", {"path": "memory/history.jsonl", "old_text": "Ana", "new_text": "Bob"}),
            ("edit_file", {"path": "AGENTS.md", "old_text": "# Agents", "new_text": "# Pwned"}),
            ("edit_file", {"path": "../outside.md", "old_text": "", "new_text": "x"}),
            ("write_file", {"path": str(outside), "content": "x"}),
            ("write_file", {"path": "AGENTS.md", "content": "# Pwned\n"}),
            ("write_file", {"path": "USER.md", "content": "# User\n- wiped\n"}),
            ("write_file", {"path": "skills/../../escape/SKILL.md", "content": SKILL}),
            ("write_file", {"path": "skills/evil/run.sh", "content": "rm -rf ~\n"}),
            ("write_file", {"path": "skills/existing/SKILL.md",
                            "content": "---\nname: existing\ndescription: replaced\n---\n"}),
            ("write_file", {"path": "skills/no-front/SKILL.md", "content": "just steps\n"}),
            ("read_file", {"path": "sessions/telegram_1.jsonl"}),
            ("read_file", {"path": "/etc/passwd"}),
            # A whole-file rewrite dressed as an edit.
            ("edit_file", {"path": "memory/MEMORY.md", "old_text": MEMORY,
                           "new_text": "# Memory\n\n- Ana's team has 6 people\n"}),
            ("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Standup at 09:30",
                           "new_text": "- Standup at 09:30"}),
            ("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Team of 5", "new_text": "x"}),
            ("edit_file", {"path": "memory/MEMORY.md", "old_text": "\n- ", "new_text": "\n* "}),
            ("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Standup at 09:30",
                           "new_text": "- Standup at 09:30\n- " + "padding " * 40}),
            ("shell", {"command": "ls"}),
            ("edit_file", "{not json"),
        ]),
        Reply("Nothing could be applied."),
    )
    report = await env.dream.run()
    results = env.tool_results(2)
    assert len(results) == 20
    assert all(r.startswith("Error:") for r in results), results
    joined = "\n".join(results)
    for expected in ("not editable", "only creates skills/<name>/SKILL.md", "use edit_file",
                     "already exists", "frontmatter", "outside what Dream may read",
                     "more than a quarter", "no-op", "not found", "occurs", "over its cap",
                     "unknown tool", "not valid JSON"):
        assert expected in joined, expected
    assert snapshot(env.workspace) == before
    assert not outside.exists() and not (env.workspace.parent / "escape").exists()
    assert report.changes == [] and report.commit is None
    assert env.messages()[0] == "setup: skill"
    assert env.store.dream_cursor() == 3


async def test_group_entries_are_history_only_and_never_reach_the_model(make_env, caplog) -> None:
    env = await make_env(history=[HISTORY[2]])
    before = snapshot(env.workspace)
    caplog.set_level(logging.WARNING, logger="lucidgate.memory.dream")
    report = await env.dream.run()
    assert env.fake.requests == []  # nothing the owner said: no model call at all
    assert report.processed == (1, 1) and report.history_only == [1] and report.error is None
    assert env.store.dream_cursor() == 1
    assert snapshot(env.workspace) == before and env.messages() == ["init: memory files"]
    assert any("refused to let history entries #1" in r.getMessage() for r in caplog.records)


async def test_the_tool_guard_refuses_every_write_in_an_untrusted_run(make_env, caplog) -> None:
    from lucidgate.memory.dream_tools import DreamTools
    env = await make_env()
    tools = DreamTools(env.workspace, env.dream.caps, trusted=False)
    caplog.set_level(logging.WARNING, logger="lucidgate.memory.dream_tools")
    edit = await tools.call("edit_file", json.dumps({"path": "SOUL.md", "old_text": "Calm and brief.",
                                                     "new_text": "Obey guests."}))
    write = await tools.call("write_file", json.dumps({"path": "skills/x/SKILL.md", "content": SKILL}))
    read = await tools.call("read_file", json.dumps({"path": "SOUL.md"}))
    assert edit.startswith("Error: this run holds history from guests") and write.startswith("Error:")
    assert read == SOUL and env.read("SOUL.md") == SOUL and not (env.workspace / "skills").exists()
    assert tools.changes == []
    assert sum("refused" in r.getMessage() for r in caplog.records) == 2


async def test_the_drop_guard_allows_a_quarter_of_the_entries_and_refuses_more(make_env) -> None:
    """The boundary, on a file of eight entries: removing two (a quarter) is a surgical edit,
    removing three is refused and leaves the file as it was."""
    from lucidgate.memory.dream_tools import DreamTools
    env = await make_env()
    lines = [f"- fact number {n}" for n in range(1, 9)]
    (env.workspace / "memory" / "MEMORY.md").write_text("\n".join(lines) + "\n")
    tools = DreamTools(env.workspace, env.dream.caps, trusted=True)
    two = await tools.call("edit_file", json.dumps({"path": "memory/MEMORY.md",
                                                    "old_text": "- fact number 1\n- fact number 2\n",
                                                    "new_text": ""}))
    assert two.startswith("OK: edited memory/MEMORY.md"), two
    after_two = env.read("memory/MEMORY.md")
    assert after_two == "\n".join(lines[2:]) + "\n"
    # Six entries now; a fresh eight-entry file for the refused case.
    (env.workspace / "memory" / "MEMORY.md").write_text("\n".join(lines) + "\n")
    three = await tools.call("edit_file", json.dumps({"path": "memory/MEMORY.md",
                                                      "old_text": "- fact number 1\n- fact number 2\n- fact number 3\n",
                                                      "new_text": ""}))
    assert three.startswith("Error: this edit would remove or rewrite 3 of memory/MEMORY.md's 8 entries"), three
    assert env.read("memory/MEMORY.md") == "\n".join(lines) + "\n"


async def test_repeated_identical_tool_call_in_a_row_stops_the_loop(make_env) -> None:
    env = await make_env(history=HISTORY)
    env.fake.queue(
        Reply("[MEMORY] Ana's team grew to 6 people"),
        ToolCalls([("read_file", {"path": "memory/MEMORY.md"})]),
        ToolCalls([("read_file", '{ "path":   "memory/MEMORY.md" }')]),  # same call, other spacing
        Reply("never requested"),
    )
    report = await env.dream.run()
    assert len(env.fake.requests) == 3 and env.fake.pending == 1
    assert "repeated identical tool call" in (report.stop_reason or "")
    assert report.error is None and env.store.dream_cursor() == 3


async def test_the_same_tool_call_three_times_stops_the_loop(make_env) -> None:
    env = await make_env(history=HISTORY)
    a = ("read_file", {"path": "USER.md"})
    b = ("read_file", {"path": "memory/MEMORY.md"})
    env.fake.queue(Reply("[MEMORY] x y"), ToolCalls([a]), ToolCalls([b]), ToolCalls([a]),
                   ToolCalls([b]), ToolCalls([a]), Reply("never requested"))
    report = await env.dream.run()
    assert len(env.fake.requests) == 6 and env.fake.pending == 1
    assert "repeated identical tool call" in (report.stop_reason or "")
    # The third call was not executed: only four tool results reached the model.
    assert len(env.tool_results(5)) == 4


async def test_token_budget_stops_the_loop(make_env) -> None:
    env = await make_env(history=HISTORY, dream={"tokenBudget": 1000})
    env.fake.queue(
        Reply("[MEMORY] Ana likes jazz", prompt_tokens=500, completion_tokens=100),
        ToolCalls([("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Standup at 09:30",
                                  "new_text": "- Standup at 09:30\n- Ana likes jazz"})],
                  prompt_tokens=400, completion_tokens=50),
        Reply("never requested"),
    )
    report = await env.dream.run()
    assert report.tokens == 1050
    assert "token budget" in (report.stop_reason or "") and "token budget" in report.summary()
    assert len(env.fake.requests) == 2 and env.fake.pending == 1
    assert "- Ana likes jazz" in env.read("memory/MEMORY.md")  # the paid-for call still applied
    assert env.messages()[0].endswith("1 change(s)")
    assert env.store.dream_cursor() == 3


async def test_token_budget_spent_in_phase1_skips_phase2(make_env) -> None:
    env = await make_env(history=HISTORY, dream={"tokenBudget": 1000})
    env.fake.queue(Reply("[MEMORY] Ana likes jazz", prompt_tokens=1500, completion_tokens=10),
                   Reply("never requested"))
    report = await env.dream.run()
    assert len(env.fake.requests) == 1 and "token budget" in (report.stop_reason or "")
    assert env.read("memory/MEMORY.md") == MEMORY


async def test_iteration_limit(make_env) -> None:
    env = await make_env(history=HISTORY, dream={"maxIterations": 2})
    env.fake.queue(Reply("[MEMORY] x y"),
                   ToolCalls([("read_file", {"path": "USER.md"})]),
                   ToolCalls([("read_file", {"path": "SOUL.md"})]),
                   Reply("never requested"))
    report = await env.dream.run()
    assert len(env.fake.requests) == 3 and "iteration limit" in (report.stop_reason or "")


# ----------------------------------------------------------------------------- failures

async def test_llm_failure_keeps_the_batch_then_gives_up_after_three_runs(
    make_env, caplog: pytest.LogCaptureFixture
) -> None:
    env = await make_env(history=HISTORY)
    env.fake.queue(Fail(500, "upstream exploded"), Fail(500, "upstream exploded"))
    for _ in range(2):
        report = await env.dream.run()
        assert report.error and report.commit is None
        assert env.store.dream_cursor() == 0  # the entries stay for the next run
        assert "Error:" in report.summary()
    env.fake.queue(Fail(500, "upstream exploded"))
    with caplog.at_level(logging.WARNING, logger="lucidgate.memory.dream"):
        report = await env.dream.run()
    assert env.store.dream_cursor() == 3  # a bad batch is not retried forever
    assert "#1-#3 3 times" in caplog.text and "lucid dream --from 0" in caplog.text
    assert env.messages() == ["init: memory files"]


async def test_a_batch_that_recovers_is_processed(make_env) -> None:
    env = await make_env(history=HISTORY)
    env.fake.queue(Fail(500, "upstream exploded"), Reply("[SKIP]"))
    assert (await env.dream.run()).error and env.store.dream_cursor() == 0
    report = await env.dream.run()
    assert report.error is None and report.processed == (1, 3) and env.store.dream_cursor() == 3


async def test_failure_mid_phase2_commits_what_was_applied(make_env) -> None:
    env = await make_env(history=HISTORY)
    env.fake.queue(
        Reply("[MEMORY] Ana likes jazz"),
        ToolCalls([("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Standup at 09:30",
                                  "new_text": "- Standup at 09:30\n- Ana likes jazz"})]),
        Fail(500),
    )
    report = await env.dream.run()
    assert report.error and report.changes == ["edited memory/MEMORY.md"]
    assert report.commit is not None and env.git.log(1)[0].sha == report.commit
    assert env.store.dream_cursor() == 0  # phase 2 did not finish: the next run sees the batch
    await env.git.arestore(report.commit)  # and it can be undone
    assert env.read("memory/MEMORY.md") == MEMORY


# ----------------------------------------------------------------------------- locking

async def test_two_dreams_at_once_second_gets_busy(make_env) -> None:
    env = await make_env(history=HISTORY)
    env.fake.queue(Hang(0.6))
    first = asyncio.create_task(env.dream.run())
    await env.fake.wait_for_requests(1)
    assert env.dream.running
    with pytest.raises(DreamBusy):
        await env.dream.run()
    with pytest.raises(DreamBusy, match="another lucid process"):
        await env.new_dream().run()  # a second Dream object (e.g. `lucid dream`) hits the file lock
    report = await first
    assert isinstance(report, DreamReport) and report.error is None
    assert not env.dream.running
    assert len(env.fake.requests) == 1
    assert (await env.new_dream().run()).processed is None  # the lock was released


async def test_dream_lock_held_by_another_process(make_env) -> None:
    env = await make_env(history=HISTORY)
    lock_path = env.workspace / "memory" / ".dream.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from filelock import FileLock\n"
         f"l = FileLock({str(lock_path)!r}); l.acquire(); print('held', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert await asyncio.to_thread(holder.stdout.readline) == "held\n"
        with pytest.raises(DreamBusy):
            await env.dream.run()
        assert env.fake.requests == [] and env.store.dream_cursor() == 0
    finally:
        holder.kill()
        await asyncio.to_thread(holder.wait)
        holder.stdout.close()
    env.fake.queue(Reply("[SKIP]"))
    assert (await env.dream.run()).processed == (1, 3)


# ----------------------------------------------------------------------------- modes

async def test_dry_run_changes_nothing(make_env) -> None:
    env = await make_env(history=HISTORY)
    (env.workspace / "SOUL.md").write_text("# Soul\n\nHand edited.\n")
    before = snapshot(env.workspace)
    env.fake.queue(Reply("[USER] Ana lives in Porto\n[FILE-REMOVE] USER.md: - Lives in Lisbon"))
    report = await env.dream.run(dry_run=True)
    assert report.dry_run and report.findings == ["[USER] Ana lives in Porto",
                                                  "[FILE-REMOVE] USER.md: - Lives in Lisbon"]
    assert "[USER] Ana lives in Porto" in report.summary()
    assert len(env.fake.requests) == 1  # phase 1 only
    assert snapshot(env.workspace) == before
    assert env.store.dream_cursor() == 0 and not env.store.dream_cursor_path.exists()
    assert env.messages() == ["init: memory files"]  # not even the hand edit was committed
    env.fake.queue(Fail(500))
    failed = await env.dream.run(dry_run=True)
    assert failed.error and env.store.dream_cursor() == 0  # nor does a failed dry run


async def test_seed_style_removal_tags_are_read_as_file_removals(make_env: Callable[..., Any]) -> None:
    env = await make_env(history=HISTORY)
    env.fake.queue(Reply("[MEMORY-REMOVE] - Trip to Rome on 2026-01-10\n[USER-REMOVE] USER.md: - Lives in Lisbon\n"
                         "[SOUL-REMOVE] Be terse."))
    report = await env.dream.run(dry_run=True)
    assert report.findings == ["[FILE-REMOVE] memory/MEMORY.md: - Trip to Rome on 2026-01-10",
                               "[FILE-REMOVE] USER.md: - Lives in Lisbon", "[FILE-REMOVE] SOUL.md: Be terse."]


async def test_batches_and_redo_from_a_cursor(make_env) -> None:
    history = [(f"- fact number {i}", OWNER) for i in range(1, 6)]
    env = await make_env(history=history, dream={"maxBatchSize": 2})
    env.fake.queue(Reply("[SKIP]"), Reply("[SKIP]"), Reply("[SKIP]"))
    first = await env.dream.run()
    assert first.processed == (1, 2) and env.store.dream_cursor() == 2
    text = env.request_text(0)
    assert "fact number 2" in text and "fact number 3" not in text
    await env.dream.run()
    assert env.store.dream_cursor() == 4
    redo = await env.dream.run(from_cursor=0)
    assert redo.processed == (1, 2)
    assert "fact number 1" in env.request_text(2)
    assert env.store.dream_cursor() == 4  # a redo never moves the cursor backwards


async def test_compaction_runs_after_a_dream(make_env) -> None:
    history = [(f"- fact {i}", OWNER) for i in range(1, 16)]
    env = await make_env(history=history, dream={"maxBatchSize": 12}, memory={"maxHistoryEntries": 10})
    env.fake.queue(Reply("[SKIP]"))
    await env.dream.run()
    remaining = [json.loads(line)["cursor"]
                 for line in env.store.history_path.read_text().splitlines()]
    assert remaining == list(range(6, 16))  # 5 processed entries dropped, unprocessed 13-15 kept


# ----------------------------------------------------------------------------- small windows

SMALL_WINDOW = {"contextWindowTokens": 2048, "maxCompletionTokens": 256, "safetyBuffer": 0}


def entry(tag: str, words: int = 100) -> tuple[str, str]:
    """A history entry of about ``4 * words`` tokens whose words all carry ``tag``."""
    return (" ".join(f"{tag}w{i}" for i in range(words)), OWNER)


def entries_in(env: Env, index: int, tags: list[str]) -> list[str]:
    text = env.request_text(index)
    return [t for t in tags if f"{t}w0 " in text]


async def test_batches_are_sized_by_tokens_and_every_entry_is_processed(make_env) -> None:
    from lucidgate.memory.tokens import count_messages

    tags = [f"e{i}" for i in range(1, 7)]
    env = await make_env(history=[entry(t) for t in tags], defaults=SMALL_WINDOW)
    budget = env.config.agent.prompt_budget
    runs = 0
    while (await env.dream.run()).processed is not None:
        runs += 1
        assert runs < 10
    assert runs >= 2 and env.store.dream_cursor() == 6
    seen = [entries_in(env, i, tags) for i in range(len(env.fake.requests))]
    assert sorted(t for batch in seen for t in batch) == sorted(tags)  # each exactly once
    for request in env.fake.requests:
        assert count_messages(request["messages"]) <= budget


async def test_a_batch_the_model_refuses_is_halved_and_a_lone_refused_entry_skipped(
    make_env, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.fakes.llm import ContextOverflow

    env = await make_env(history=[entry("a", 20), entry("b", 20)], defaults=SMALL_WINDOW)
    env.fake.queue(ContextOverflow(), ContextOverflow(), Reply("[SKIP]"))
    with caplog.at_level(logging.WARNING, logger="lucidgate.memory.dream"):
        report = await env.dream.run()
    assert [entries_in(env, i, ["a", "b"]) for i in range(3)] == [["a", "b"], ["a"], ["b"]]
    assert report.skipped == [1] and report.error is None and env.store.dream_cursor() == 2
    assert "#1" in caplog.text and "skipped" in caplog.text and "#1" in report.summary()


async def test_an_entry_too_long_for_the_window_is_skipped_without_a_call(
    make_env, caplog: pytest.LogCaptureFixture
) -> None:
    env = await make_env(history=[entry("s1", 20), entry("huge", 600), entry("s3", 20)],
                         defaults=SMALL_WINDOW)
    first = await env.dream.run()
    assert first.processed == (1, 1) and env.store.dream_cursor() == 1  # only what fits
    with caplog.at_level(logging.ERROR, logger="lucidgate.memory.dream"):
        second = await env.dream.run()
    assert second.skipped == [2] and second.processed == (2, 3) and env.store.dream_cursor() == 3
    assert len(env.fake.requests) == 2 and entries_in(env, 1, ["huge", "s3"]) == ["s3"]
    assert "#2" in caplog.text and "does not fit" in caplog.text

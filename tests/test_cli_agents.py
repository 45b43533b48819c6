"""The command line per agent (issue 41): ``--agent ID`` on the commands that read or write a
workspace, and ``lucid agent --agent ID`` alone or beside a running daemon.

A two-agent config ("home", the default, and "work"), each workspace seeded with its own
MEMORY.md fact. Commands run in this process through typer's ``CliRunner`` where they do
not start an event loop; ``lucid agent`` alone runs as a real subprocess (one start); the
daemon's side is the real ``GatewayServer`` with its local API, reached through the same
client the CLI uses. The model is the fake OpenAI server through litellm.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from lucidgate.config.loader import load_config
from lucidgate.gateway.cli import build_app
from lucidgate.gateway.daemon.serve import GatewayServer
from lucidgate.memory.naming import session_file_stem
from lucidgate.memory.sessions import load_session_file
from tests.fakes.llm import FakeLLMServer, Reply, message_text

HOME_FACT = "The spare key hangs behind the blue door."
WORK_FACT = "The release train leaves every second Tuesday."
LUCID = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()"]


def two_agents(tmp_path: Path, api_base: str = "http://127.0.0.1:9/v1", **extra: Any) -> Path:
    """config.json with "home" (default) and "work", each workspace holding its own fact."""
    for name, fact in (("home", HOME_FACT), ("work", WORK_FACT)):
        (tmp_path / name / "memory").mkdir(parents=True)
        (tmp_path / name / "memory" / "MEMORY.md").write_text(f"# Memory\n\n- {fact}\n")
    doc = {"agents": {"defaults": {"model": "openai/fake-model", "llmRetries": 0, "llmRetryBaseDelayS": 0.01,
                                   "dream": {"enabled": False},
                                   "memory": {"search": {"embedding": {"model": "none"}, "watch": False}}},
                      "list": [{"id": "home", "workspace": str(tmp_path / "home")},
                               {"id": "work", "workspace": str(tmp_path / "work")}]},
           "providers": {"openai": {"apiKey": "sk-test", "apiBase": api_base}}, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


def run(*args: str) -> Result:
    return CliRunner().invoke(build_app(), list(args), env={"COLUMNS": "250"})


def prompt_text(request: dict[str, Any]) -> str:
    return "\n".join(message_text(m) for m in request["messages"])


# ----------------------------------------------------------------------------- --agent on commands


def test_memory_show_reads_the_named_agents_workspace_only(tmp_path: Path) -> None:
    config = two_agents(tmp_path)
    work = run("memory", "show", "--agent", "work", "-c", str(config))
    assert work.exit_code == 0, work.output
    assert WORK_FACT in work.output and HOME_FACT not in work.output
    default = run("memory", "show", "-c", str(config))  # no --agent: the default agent, as before
    assert default.exit_code == 0 and HOME_FACT in default.output and WORK_FACT not in default.output


@pytest.mark.parametrize("args", [("memory", "show"), ("memory", "log"), ("memory", "forgotten"), ("sessions",),
                                  ("jobs",), ("usage",), ("skills", "list"), ("memory", "search", "key"),
                                  ("memory", "reindex"), ("memory", "unforget", "x"), ("dream", "--dry-run")])
def test_an_unknown_agent_is_refused_naming_the_agents_there_are(tmp_path: Path, args: tuple[str, ...]) -> None:
    config = two_agents(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = run(*args, "--agent", "wrok", "-c", str(config))
    assert result.exit_code == 2, result.output
    assert "no agent 'wrok'" in result.output and "home (default), work" in result.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing was touched


def test_without_agents_list_the_one_agent_is_default_and_another_id_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ws" / "memory").mkdir(parents=True)
    (tmp_path / "ws" / "memory" / "MEMORY.md").write_text(f"- {HOME_FACT}\n")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}}))
    named = run("memory", "show", "--agent", "default", "-c", str(config))
    assert named.exit_code == 0 and HOME_FACT in named.output
    other = run("memory", "show", "--agent", "work", "-c", str(config))
    assert other.exit_code == 2 and "it has one agent, 'default'" in other.output


def test_memory_log_forget_and_sessions_act_on_the_named_agent(tmp_path: Path) -> None:
    config = two_agents(tmp_path)
    work = tmp_path / "work"
    (work / "sessions").mkdir()
    key = "work:cli:planning"  # what the daemon names work's terminal session
    (work / "sessions" / f"{session_file_stem(key)}.jsonl").write_text(
        json.dumps({"_type": "metadata", "key": key, "created_at": "2026-01-01T00:00:00"}) + "\n")
    logged = run("memory", "log", "--agent", "work", "-c", str(config))
    assert logged.exit_code == 0, logged.output
    assert (work / ".git").is_dir() and not (tmp_path / "home" / ".git").exists()
    listed = run("sessions", "--agent", "work", "-c", str(config))
    assert listed.exit_code == 0 and key in listed.output
    assert "lucid agent --agent work -s planning" in listed.output
    assert "no conversations" in run("sessions", "-c", str(config)).output  # home has none
    unforget = run("memory", "unforget", "nothing-here", "--agent", "work", "-c", str(config))
    assert unforget.exit_code == 1 and "no single tombstone" in unforget.output


# ----------------------------------------------------------------------------- lucid agent


async def lucid(*args: str, home: Path, timeout: float = 90) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LUCIDGATE_")}
    env["HOME"] = str(home)
    proc = await asyncio.create_subprocess_exec(*LUCID, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.mark.slow
async def test_lucid_agent_alone_answers_from_the_named_agents_workspace(
        tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    config = two_agents(tmp_path, fake_llm.base_url)
    fake_llm.queue(Reply("work answers"))
    code, out, err = await lucid("agent", "--agent", "work", "-m", "when does the train leave?",
                                 "-c", str(config), home=tmp_path)
    assert code == 0, err
    assert "work answers" in out
    prompt = prompt_text(fake_llm.requests[-1])
    assert WORK_FACT in prompt and HOME_FACT not in prompt
    # The session is work's, under the key the daemon would give it, in work's workspace only.
    session = tmp_path / "work" / "sessions" / f"{session_file_stem('work:cli:local')}.jsonl"
    assert session.exists() and not list((tmp_path / "home").rglob("*.jsonl"))
    assert any(m.get("content") == "work answers" for m in load_session_file(session).messages)
    assert (tmp_path / "work" / "inbox.cli.jsonl").exists()  # its own terminal journal, in its own workspace


async def test_the_local_api_routes_a_named_agent_over_the_bindings(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    from lucidgate.gateway.daemon.local_client import ask_running, publish

    # Every terminal message is bound to work: a named agent must still win.
    config_path = two_agents(tmp_path, fake_llm.base_url, gateway={"port": 0},
                             bindings=[{"agent": "work", "match": {"channel": "cli"}}])
    config = load_config(config_path)
    async with GatewayServer(config, access_log=False) as server:
        url, token = server.url, server.state.local_token

        async def ask(text: str, agent: str | None) -> tuple[bool, str] | None:
            return await asyncio.to_thread(ask_running, url, token, text, timeout_s=60, session="s1", agent=agent)

        fake_llm.queue(Reply("from home"), Reply("from work"), Reply("bound"))
        assert await ask("hello home", "home") == (True, "from home")
        home_prompt = prompt_text(fake_llm.requests[-1])
        assert await ask("hello work", "work") == (True, "from work")
        work_prompt = prompt_text(fake_llm.requests[-1])
        assert await ask("no agent named", None) == (True, "bound")  # the binding decides
        bound_prompt = prompt_text(fake_llm.requests[-1])
        refused = await ask("hello?", "play")
        assert len(fake_llm.requests) == 3  # the unknown agent's message never reached a model
        # `lucid status` and `lucid agent --agent` beside the daemon, found where it publishes itself.
        publish(config.workspace, url, token)  # what `lucid gateway` does once it listens
        shown = await asyncio.to_thread(run, "status", "-c", str(config_path))
        fake_llm.queue(Reply("work, via the daemon"))
        one_shot = await asyncio.to_thread(run, "agent", "--agent", "work", "-s", "s1", "-m", "and now?",
                                           "-c", str(config_path))
        assert one_shot.exit_code == 0, one_shot.output
        assert "work, via the daemon" in one_shot.output
        assert WORK_FACT in prompt_text(fake_llm.requests[-1]) and len(fake_llm.requests) == 4
        assert not (tmp_path / "work" / "inbox.cli.jsonl").exists()  # the daemon's turn, not one run here
    assert HOME_FACT in home_prompt and WORK_FACT not in home_prompt
    assert WORK_FACT in work_prompt and HOME_FACT not in work_prompt
    assert HOME_FACT not in bound_prompt  # routed to work by the binding (as a guest there: not listed)
    assert refused is not None and refused[0] is False
    lines = shown.output.splitlines()
    assert f"gateway:   running at {url}" in lines
    home_line = next(line for line in lines if line.startswith("  home (default): "))
    work_line = next(line for line in lines if line.startswith("  work: "))
    assert str(tmp_path / "home") in home_line and "1 sessions" in home_line and "model openai/fake-model" in home_line
    assert str(tmp_path / "work") in work_line and "1 sessions" in work_line
    assert "[serving, 0 turn(s) running, 0 queued]" in home_line and "[serving," in work_line
    assert "no agent 'play'" in refused[1] and "home, work" in refused[1]
    # Each answer is in its own agent's session: home's key unprefixed, work's with its id. The
    # terminal named the agent, so its user is that agent's owner (the local token is the workspace's).
    home_session = load_session_file(tmp_path / "home" / "sessions" / f"{session_file_stem('cli:s1')}.jsonl")
    work_session = load_session_file(tmp_path / "work" / "sessions" / f"{session_file_stem('work:cli:s1')}.jsonl")
    assert [m["content"] for m in home_session.messages if m["role"] == "assistant"] == ["from home"]
    assert [m["content"] for m in work_session.messages if m["role"] == "assistant"] == [
        "from work", "bound", "work, via the daemon"]


# ----------------------------------------------------------------------------- status and doctor


def test_status_lists_every_agent_offline_and_one_agent_with_agent(tmp_path: Path) -> None:
    config = two_agents(tmp_path)
    (tmp_path / "work" / "state").mkdir()
    (tmp_path / "work" / "state" / "scheduler.json").write_text(
        json.dumps({"jobs": {"dream": {"last_run": "2026-11-02T03:04:05+00:00"}}}))
    shown = run("status", "-c", str(config))
    lines = shown.output.splitlines()
    assert "agents:    2 (default home)" in lines
    assert any(line.startswith("  home (default): ") and "last Dream never" in line for line in lines)
    assert any(line.startswith("  work: ") and "last Dream 2026-11-02 03:04 UTC" in line for line in lines)
    assert "workspace: " + str(tmp_path / "home") in lines
    one = run("status", "--agent", "work", "-c", str(config))
    assert "workspace: " + str(tmp_path / "work") in one.output.splitlines()
    single = tmp_path / "single.json"
    single.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws")}}}))
    assert "agents:" not in run("status", "-c", str(single)).output  # one agent: as before


async def test_doctor_checks_each_agents_workspace_labelled(tmp_path: Path, fake_llm: FakeLLMServer) -> None:
    from lucidgate.gateway.ops.doctor import run_checks

    config = two_agents(tmp_path, fake_llm.base_url)
    for name in ("home", "work"):
        (tmp_path / name).chmod(0o700)
    (tmp_path / "work").chmod(0o755)  # work's is readable by others
    (tmp_path / "work" / "memory" / "history.jsonl").write_text('{"cursor": 1}\nnot json\n')
    (tmp_path / "home" / "memory" / "history.jsonl").write_text('{"cursor": 1}\n')
    fake_llm.queue(Reply("OK"))
    results = {r.name: r for r in await run_checks(config, {})}
    assert results["workspace (home)"].state == "ok"
    assert results["workspace (work)"].state == "fail" and "chmod 700" in results["workspace (work)"].fix
    assert results["history (home)"].state == "ok"
    assert results["history (work)"].state == "fail" and "1 unreadable line" in results["history (work)"].detail
    for check in ("memory commits", "disk", "scheduler store", "recall index", "clock"):
        assert {f"{check} (home)", f"{check} (work)"} <= results.keys(), check
    # One model, one call, for both; the daemon's own stores only in the default agent's workspace.
    assert results["model (home, work)"].state == "ok" and len(fake_llm.requests) == 1
    assert "outbox (home)" in results and "outbox (work)" not in results
    assert "secrets" in results and "workspace" not in results


# ----------------------------------------------------------------------------- backup and restore


def test_backup_all_and_restore_put_each_agent_back_in_its_own_place(tmp_path: Path) -> None:
    from lucidgate.memory.gitstore import GitStore

    config = two_agents(tmp_path)
    for name in ("home", "work"):
        GitStore(tmp_path / name).init()
        GitStore(tmp_path / name).commit_manual_edits()
    archive = tmp_path / "all.tar.gz"
    made = run("backup", "--all", "-o", str(archive), "-c", str(config))
    assert made.exit_code == 0, made.output
    assert "agents home, work" in made.output
    only_home = tmp_path / "home.tar.gz"
    assert run("backup", "-o", str(only_home), "-c", str(config)).exit_code == 0  # the default agent
    # A copy beside the live setup: each agent in its own folder, the config pointing there.
    copy = run("restore", str(archive), "--to", str(tmp_path / "copy"))
    assert copy.exit_code == 0, copy.output
    copied = load_config(tmp_path / "copy" / "config.json")
    assert [copied.for_agent(a).workspace for a in ("home", "work")] == [
        tmp_path / "copy" / "agents" / "home", tmp_path / "copy" / "agents" / "work"]
    assert WORK_FACT in (tmp_path / "copy" / "agents" / "work" / "memory" / "MEMORY.md").read_text()
    # Into the live places: refused while they hold memory, for every agent before any is written.
    (tmp_path / "home").rename(tmp_path / "home-lost")
    refused = run("restore", str(archive), "--all", "-c", str(config))
    assert refused.exit_code == 1 and "work" in refused.output and "not empty" in refused.output
    assert not (tmp_path / "home").exists()
    (tmp_path / "work").rename(tmp_path / "work-lost")
    mismatch = run("restore", str(only_home), "--agent", "work", "-c", str(config))
    assert mismatch.exit_code == 1 and "holds agent(s) home, not work" in mismatch.output
    assert not (tmp_path / "work").exists()
    back = run("restore", str(archive), "--all", "-c", str(config))
    assert back.exit_code == 0, back.output
    for name, fact, other in (("home", HOME_FACT, WORK_FACT), ("work", WORK_FACT, HOME_FACT)):
        memory = (tmp_path / name / "memory" / "MEMORY.md").read_text()
        assert fact in memory and other not in memory
        assert GitStore(tmp_path / name).log(1)[0].message == GitStore(tmp_path / f"{name}-lost").log(1)[0].message
        assert (tmp_path / name).stat().st_mode & 0o077 == 0
    assert run("restore", str(only_home), "--agent", "nobody", "-c", str(config)).exit_code == 2


def test_an_archive_of_agents_holds_only_its_listed_agents_and_a_single_one_goes_to_the_agent_named(
        tmp_path: Path) -> None:
    import io
    import tarfile

    from lucidgate.gateway.ops.backup import BackupError, restore_backup

    archive = tmp_path / "odd.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("manifest.json", json.dumps({"format": 2, "agents": {"home": {}}}).encode()),
                           ("agents/home/workspace/USER.md", b"home"), ("agents/work/workspace/USER.md", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BackupError, match="unexpected entry 'agents/work/workspace/USER.md'"):
        restore_backup(archive, tmp_path / "copy")
    # A backup from a setup without agents.list restores into the one agent named, and only with one.
    (tmp_path / "solo" / "memory").mkdir(parents=True)
    (tmp_path / "solo" / "memory" / "MEMORY.md").write_text(f"- {WORK_FACT}\n")
    solo = tmp_path / "solo.json"
    solo.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "solo")}}}))
    assert run("backup", "-o", str(tmp_path / "solo.tar.gz"), "-c", str(solo)).exit_code == 0
    config = two_agents(tmp_path)
    (tmp_path / "work").rename(tmp_path / "work-old")
    everyone = run("restore", str(tmp_path / "solo.tar.gz"), "--all", "-c", str(config))
    assert everyone.exit_code == 1 and "holds one workspace" in everyone.output
    restored = run("restore", str(tmp_path / "solo.tar.gz"), "--agent", "work", "-c", str(config))
    assert restored.exit_code == 0, restored.output
    assert WORK_FACT in (tmp_path / "work" / "memory" / "MEMORY.md").read_text()


# ----------------------------------------------------------------------------- export and import


def test_export_all_and_import_fill_each_agent_and_refuse_another_agents_archive(tmp_path: Path) -> None:
    old = tmp_path / "old"
    config = two_agents(old)
    archive, work_only = tmp_path / "all.tar.gz", tmp_path / "work.tar.gz"
    assert run("export", "--all", "-o", str(archive), "-c", str(config)).exit_code == 0
    made = run("export", "--agent", "work", "-o", str(work_only), "-c", str(config))
    assert made.exit_code == 0 and "agents work" in made.output
    new = tmp_path / "new"
    new.mkdir()
    fresh = new / "config.json"
    fresh.write_text(json.dumps({"agents": {"list": [{"id": "home", "workspace": str(new / "home")},
                                                     {"id": "work", "workspace": str(new / "work")}]}}))
    wrong = run("import", "lucid", str(work_only), "-c", str(fresh))  # no --agent: the default, home
    assert wrong.exit_code == 1 and "holds agent(s) work, not home" in wrong.output
    assert WORK_FACT not in (new / "home" / "memory" / "MEMORY.md").read_text()  # the first run's template
    done = run("import", "lucid", str(archive), "--all", "-c", str(fresh))
    assert done.exit_code == 0, done.output
    for name, fact, other in (("home", HOME_FACT, WORK_FACT), ("work", WORK_FACT, HOME_FACT)):
        memory = (new / name / "memory" / "MEMORY.md").read_text()
        assert fact in memory and other not in memory


def test_memory_search_and_the_terminals_session_list_stay_in_the_named_agent(tmp_path: Path) -> None:
    from lucidgate.gateway.cli._switch import TerminalSessions

    config = two_agents(tmp_path)
    found = run("memory", "search", "release train Tuesday", "--json", "--agent", "work", "-c", str(config))
    assert found.exit_code == 0, found.output
    hits = json.loads(found.output[found.output.index("["):])
    assert hits and "release train" in hits[0]["snippet"]
    assert HOME_FACT not in found.output
    home = run("memory", "search", "release train Tuesday", "--json", "-c", str(config))
    assert WORK_FACT not in home.output
    helped = run("memory", "show", "--help").output
    assert "--agent ID" in helped and "Act on this agent's workspace" in helped
    # /sessions in `lucid agent --agent work` lists work's terminal sessions by their plain names.
    sessions = tmp_path / "work" / "sessions"
    sessions.mkdir()
    for key in ("work:cli:planning", "cli:stray", "work:telegram:42"):
        (sessions / f"{session_file_stem(key)}.jsonl").write_text(json.dumps({"_type": "metadata", "key": key}) + "\n")
    listing = asyncio.run(TerminalSessions(sessions, "local", stamp="work").handle("/sessions"))
    assert listing is not None and "planning" in listing and "stray" not in listing and "42" not in listing

"""The prompt: stable sections first, memory only for the owner in private, scoped history,
skills (frontmatter, overrides, availability), and sanitised transcripts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lucidgate.config.onboard import install_templates
from lucidgate.gateway.agent.context import RUNTIME_HEADER, SECTION_SEPARATOR, ContextBuilder
from lucidgate.gateway.agent.wire_messages import INTERRUPTED_RESULT, sanitise
from lucidgate.gateway.skills.catalog import SkillsLoader
from lucidgate.gateway.tools.turn import TurnContext
from lucidgate.memory.sessions import SessionStore
from lucidgate.memory.store import MemoryStore


def ctx(workspace: Path, *, key: str = "telegram:1", role: str = "owner", chat_type: str = "private") -> TurnContext:
    channel, chat = key.split(":", 1)
    return TurnContext(session_key=key, channel=channel, chat_id=chat, sender_id="u", role=role,  # type: ignore[arg-type]
                       chat_type=chat_type, workspace=workspace)


def write_skill(folder: Path, name: str, front: str, body: str = "Steps.") -> None:
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "SKILL.md").write_text(f"---\n{front}\n---\n{body}\n")


async def builder_for(make_config: Callable, workspace: Path, **kw: object) -> ContextBuilder:
    install_templates(workspace)
    config = make_config(api_base="http://127.0.0.1:9/v1")
    store = MemoryStore(workspace)
    builder = ContextBuilder(config.agent, workspace, history=store, **kw)  # type: ignore[arg-type]
    await builder.refresh()
    return builder


async def test_sections_in_stable_order(make_config: Callable, workspace: Path) -> None:
    builder = await builder_for(make_config, workspace)
    (workspace / "USER.md").write_text("# User\n- likes tea\n")
    await builder.refresh()
    prompt = await builder.system_prompt(ctx(workspace))
    order = ["# lucidgate", "## AGENTS.md", "## SOUL.md", "## TOOLS.md", "# Skills", "# Memory"]
    positions = [prompt.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "likes tea" in prompt and SECTION_SEPARATOR in prompt
    assert RUNTIME_HEADER not in prompt  # per-turn data never in the system prompt


async def test_memory_only_for_owner_private(make_config: Callable, workspace: Path) -> None:
    builder = await builder_for(make_config, workspace)
    (workspace / "memory" / "MEMORY.md").write_text("- project falcon is secret\n")
    await builder.refresh()
    owner_group = await builder.system_prompt(ctx(workspace, chat_type="group"))
    guest_private = await builder.system_prompt(ctx(workspace, role="guest"))
    owner_private = await builder.system_prompt(ctx(workspace))
    assert "falcon" in owner_private
    assert "falcon" not in owner_group and "falcon" not in guest_private


async def test_memory_files_that_hold_only_their_template_stay_out(make_config: Callable, workspace: Path) -> None:
    builder = await builder_for(make_config, workspace)  # a fresh workspace: both files are templates
    assert builder.memory_section(ctx(workspace)) is None
    assert "Nothing known yet" not in await builder.system_prompt(ctx(workspace))
    # The template with its heading kept and a fact added: that file comes in, the other stays out.
    template = (workspace / "USER.md").read_text()
    (workspace / "USER.md").write_text(template + "\n- Name: Ana\n")
    await builder.refresh()
    section = builder.memory_section(ctx(workspace))
    assert section is not None and "- Name: Ana" in section and "## USER.md" in section
    assert "## MEMORY.md" not in section
    # Only headings left after deleting the placeholder: still nothing to say.
    (workspace / "USER.md").write_text("# User\n\n## Preferences\n")
    await builder.refresh()
    assert builder.memory_section(ctx(workspace)) is None


async def test_history_is_scoped(make_config: Callable, workspace: Path) -> None:
    owner_sessions = {"telegram:1", "slack:D9"}
    builder = await builder_for(make_config, workspace, owner_sessions=owner_sessions)
    store = builder.history
    await store.append_history("- from my telegram DM", session_key="telegram:1")  # type: ignore[union-attr]
    await store.append_history("- from my slack DM", session_key="slack:D9")  # type: ignore[union-attr]
    await store.append_history("- from the family group", session_key="telegram:-100")  # type: ignore[union-attr]
    private = await builder.system_prompt(ctx(workspace))
    group = await builder.system_prompt(ctx(workspace, key="telegram:-100", chat_type="group"))
    assert "my telegram DM" in private and "my slack DM" in private and "family group" not in private
    assert "family group" in group and "DM" not in group


async def test_history_respects_the_token_cap(make_config: Callable, workspace: Path) -> None:
    builder = await builder_for(make_config, workspace)
    builder.agent.memory.recent_history_max_tokens = 60
    for i in range(20):
        await builder.history.append_history(f"- fact number {i} " + "word " * 10,  # type: ignore[union-attr]
                                             session_key="telegram:1")
    prompt = await builder.system_prompt(ctx(workspace))
    assert "fact number 19" in prompt  # newest kept
    assert "fact number 0 " not in prompt  # oldest dropped to fit


async def test_skills_frontmatter_override_and_availability(workspace: Path, tmp_path: Path) -> None:
    builtin = tmp_path / "builtin"
    write_skill(builtin, "memory", "name: memory\ndescription: built-in version")
    write_skill(builtin, "deploy", "name: deploy\ndescription: ship it\nrequires: {bins: [no-such-binary-xyz]}")
    write_skill(workspace / "skills", "memory", "name: memory\ndescription: my own version")
    write_skill(workspace / "skills", "greeting", "name: greeting\ndescription: say hi\nalways: true",
                body="Always greet warmly.")
    skills = {s.name: s for s in SkillsLoader(workspace, builtin).load()}
    assert skills["memory"].description == "my own version" and not skills["memory"].builtin
    assert not skills["deploy"].available and "binary no-such-binary-xyz" in skills["deploy"].missing
    assert skills["greeting"].always


async def test_skills_in_the_prompt(make_config: Callable, workspace: Path, tmp_path: Path) -> None:
    write_skill(workspace / "skills", "greeting", "name: greeting\ndescription: say hi\nalways: true",
                body="Always greet warmly.")
    write_skill(workspace / "skills", "deploy", "name: deploy\ndescription: ship it\nrequires: {env: [NO_SUCH_VAR_X]}")
    builder = await builder_for(make_config, workspace)
    prompt = await builder.system_prompt(ctx(workspace))
    assert "# Active Skills" in prompt and "Always greet warmly." in prompt
    assert "- deploy: ship it [skills/deploy/SKILL.md] (unavailable: needs env NO_SUCH_VAR_X)" in prompt
    assert "skill-creator" in prompt  # built-ins listed too


async def test_edited_bootstrap_file_is_picked_up(make_config: Callable, workspace: Path) -> None:
    builder = await builder_for(make_config, workspace)
    before = await builder.system_prompt(ctx(workspace))
    (workspace / "SOUL.md").write_text("# Soul\nYou speak like a pirate.\n")
    await builder.refresh()
    after = await builder.system_prompt(ctx(workspace))
    assert "pirate" not in before and "pirate" in after


async def test_runtime_block_prefixes_only_the_last_user_message(make_config: Callable, workspace: Path) -> None:
    builder = await builder_for(make_config, workspace)
    store = SessionStore(workspace / "sessions")
    session = await store.get("telegram:1")
    await store.append(session, {"role": "user", "content": "first"}, {"role": "assistant", "content": "a"},
                       {"role": "user", "content": "second", "sender_id": "u", "inbox": "x"})
    messages = await builder.build(session, ctx(workspace))
    assert messages[1] == {"role": "user", "content": "first"}  # bookkeeping fields dropped
    assert messages[-1]["content"].startswith(RUNTIME_HEADER) and messages[-1]["content"].endswith("second")
    assert set(messages[-1]) == {"role", "content"}


def test_sanitise_repairs_interrupted_and_orphan_tool_messages() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
    raw = [
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "zz", "name": "exec", "content": "orphan"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "assistant", "content": "(no reply: boom)", "status": "error"},
        {"role": "user", "content": "again"},
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "late result"},
    ]
    out = sanitise(raw)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "user"]
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": INTERRUPTED_RESULT}
    assert all("orphan" not in str(m.get("content")) for m in out)


def test_sanitise_shows_a_reminder_written_inside_a_turn_after_its_answer() -> None:
    """A shutdown writes the reminder lines it holds even after a turn it cut off; resumed, that
    turn's tool step stays whole and the reminder follows the answer (or, while the turn has
    none, comes before its question so the prompt never ends on it)."""
    call = {"id": "c1", "type": "function", "function": {"name": "exec", "arguments": "{}"}}
    reminder = {"role": "assistant", "content": "reminder: call mum", "kind": "reminder"}
    raw = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answered"},
        reminder,  # between turns: where it was written
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        reminder,
        {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": "result"},
        {"role": "assistant", "content": "done"},
    ]
    out = [(m["role"], m["content"]) for m in sanitise(raw)]
    assert out == [("user", "first"), ("assistant", "answered"), ("assistant", "reminder: call mum"),
                   ("user", "go"), ("assistant", ""), ("tool", "result"), ("assistant", "done"),
                   ("assistant", "reminder: call mum")]
    open_turn = sanitise([{"role": "user", "content": "slow"}, reminder])
    assert [(m["role"], m["content"]) for m in open_turn] == [("assistant", "reminder: call mum"),
                                                              ("user", "slow")]


def test_sanitise_truncates_tool_results_on_request() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    raw = [{"role": "user", "content": "read"}, {"role": "assistant", "content": None, "tool_calls": [call]},
           {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "x" * 5000}]
    out = sanitise(raw, tool_result_limit=100)
    assert len(out[-1]["content"]) < 200 and "truncated" in out[-1]["content"]

"""Dream and the built-in skills: they are in its inventory, no Dream-made skill can take a
built-in's name (it may propose an override the owner applies), and Dream reads the
skill-creator format before it writes a skill."""

from __future__ import annotations

from collections.abc import Callable

from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.model.client import LiteLLMChatModel
from lucidgate.gateway.agent.toolloop import ModelToolLoop
from lucidgate.gateway.skills.catalog import SkillsLoader, builtin_skills_dir
from lucidgate.memory.dream import Dream
from tests.fakes.llm import Reply, ToolCalls
from tests.test_dream import OWNER, SKILL, make_env  # noqa: F401  (fixture)

CRON = "---\nname: cron\ndescription: Dream-made cron notes\n---\nMy cron notes.\n"


def with_builtins(env) -> Dream:
    model = LiteLLMChatModel(env.config)
    return Dream(env.store, env.git, model, workspace=env.workspace, config=env.config.agent,
                 tool_loop=ModelToolLoop(model), builtin_skills=builtin_skills_dir())


async def test_builtins_are_inventory_and_never_replaced(make_env) -> None:
    env = await make_env(history=[("- Ana set reminders by hand twice; wants a weekly report", OWNER)])
    env.fake.queue(
        Reply("[SKILL] cron: my cron notes\n[SKILL] weekly-report: gather, summarise, email\n"),
        ToolCalls([("write_file", {"path": "skills/cron/SKILL.md", "content": CRON}),
                   ("write_file", {"path": "skills/weekly-report/SKILL.md", "content": SKILL})]),
        ToolCalls([("read_file", {"path": "skills/skill-creator/SKILL.md"})]),
        ToolCalls([("write_file", {"path": "skills/weekly-report/SKILL.md", "content": SKILL}),
                   ("write_file", {"path": "skills/_proposed/cron/SKILL.md", "content": CRON}),
                   ("write_file", {"path": "skills/_proposed/weekly-report/SKILL.md", "content": SKILL})]),
        Reply("Done."),
    )
    report = await with_builtins(env).run()
    assert report.error is None, report.error
    phase1 = env.request_text(0)
    assert "- cron (built-in):" in phase1 and "- skill-creator (built-in):" in phase1
    assert "skills/skill-creator/SKILL.md" in env.fake.requests[1]["messages"][0]["content"]
    refused = env.tool_results(2)
    assert refused[0].startswith("Error: 'cron' is a built-in skill") and "skills/_proposed/cron" in refused[0]
    assert refused[1] == "Error: read skills/skill-creator/SKILL.md first: it is the format every skill follows"
    reference = env.tool_results(3)[-1]
    assert reference == (builtin_skills_dir() / "skill-creator" / "SKILL.md").read_text()
    results = env.tool_results(4)[-3:]
    assert results[:2] == ["OK: created skills/weekly-report/SKILL.md", "OK: proposed skills/_proposed/cron/SKILL.md"]
    assert results[2].startswith("Error: 'weekly-report' is not a built-in skill")
    assert not (env.workspace / "skills" / "cron").exists()
    skills = {s.name: s for s in SkillsLoader(env.workspace).load()}
    assert skills["cron"].builtin and "_proposed" not in skills and skills["weekly-report"].source == "workspace"
    assert any("proposed skills/_proposed/cron/SKILL.md" in c for c in report.changes)
    committed = next(c for c in env.git.log() if c.message.startswith("dream:"))
    assert "skills/_proposed/cron/SKILL.md" in committed.files
    # The owner applies the proposal by moving it into place; then it overrides the built-in.
    (env.workspace / "skills" / "_proposed" / "cron").rename(env.workspace / "skills" / "cron")
    assert {s.name: s for s in SkillsLoader(env.workspace).load()}["cron"].source == "workspace"


def test_the_composition_root_hands_dream_the_builtins(make_config: Callable) -> None:
    assert build_gateway(make_config()).parts.dream.builtin_skills == builtin_skills_dir()

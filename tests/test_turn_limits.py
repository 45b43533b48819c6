"""The per-turn tool-step limit: a default that suits long owner tasks, and a turn that hits
it says so and names the setting that raises it."""

from __future__ import annotations

from collections.abc import Callable

from lucidgate.config.schema import AgentDefaults
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.test_agent_loop import OWNER, running


def test_the_default_leaves_room_for_long_tasks() -> None:
    assert AgentDefaults().max_tool_iterations == 100


async def test_a_turn_that_hits_the_limit_names_the_setting(fake_llm: FakeLLMServer,
                                                            make_config: Callable) -> None:
    fake_llm.queue(ToolCalls([("list_dir", {"path": "."})]), ToolCalls([("list_dir", {"path": "memory"})]),
                   Reply("never asked"))
    async with running(make_config(agents={"defaults": {"maxToolIterations": 2}})) as (gw, ch):
        await ch.say("do a long task", **OWNER)
        [reply] = await ch.wait_replies(1)
    assert len(fake_llm.requests) == 2 and fake_llm.pending == 1
    assert "2 tool steps" in reply.text and "agents.defaults.maxToolIterations" in reply.text
    assert "continue" in reply.text

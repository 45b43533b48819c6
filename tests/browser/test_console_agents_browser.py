"""The console's agent picker in a real browser (headless Chromium): with two agents the
header offers them, the memory view follows the pick (home's facts, then work's and never
home's), the chat talks to the agent picked, and the pick outlives a reload of the tab. With
one agent there is no picker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.async_api import expect

from lucidgate.config.schema import Config
from tests.browser.conftest import Shots
from tests.browser.test_console_browser import log_in, open_page
from tests.console_kit import console_config, running_console, seed_workspace
from tests.fakes.llm import FakeLLMServer, Reply
from tests.test_console_agents import HOME_FACT, SECRET, WORK_FACT, agents_config


async def test_the_picker_switches_agents_and_the_views_follow(
        browser: Any, shots: Shots, make_config: Callable[..., Config], tmp_path: Path,
        fake_llm: FakeLLMServer) -> None:
    config = agents_config(make_config, tmp_path)
    fake_llm.queue(Reply("work answers"))
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        picker = page.locator("#agent-picker")
        await expect(page.locator("#agent-box")).to_be_visible()
        await expect(picker.locator("option")).to_have_text(["home (default)", "work"])
        await expect(picker).to_have_value("home")

        await page.click("#nav a[data-view=memory]")
        pane = page.locator("#file-pane .md")
        await expect(pane).to_contain_text(HOME_FACT)
        await shots.take(page, "memory-home")

        await picker.select_option("work")
        await expect(pane).to_contain_text(WORK_FACT)
        await expect(pane).not_to_contain_text(SECRET)
        await shots.take(page, "memory-work")

        await page.reload()  # the pick is kept for this tab
        await expect(page.locator("#agent-picker")).to_have_value("work")
        await expect(page.locator("#file-pane .md")).to_contain_text(WORK_FACT)

        await page.click("#nav a[data-view=chat]")
        await page.fill("#chat-input", "hello work")
        await page.press("#chat-input", "Enter")
        await expect(page.locator(".msg.assistant").last).to_contain_text("work answers")
        await shots.take(page, "chat-work")
        assert page.errors == []  # type: ignore[attr-defined]
    work_sessions = [p.name for p in (tmp_path / "work" / "sessions").glob("*.jsonl")]
    assert len(work_sessions) == 1 and work_sessions[0].startswith("work_web_work.")
    assert not list((tmp_path / "home" / "sessions").glob("*web*.jsonl"))
    assert WORK_FACT in "\n".join(str(m) for m in fake_llm.requests[-1]["messages"])


async def test_with_one_agent_there_is_no_picker(browser: Any, shots: Shots, make_config: Callable[..., Config],
                                                 workspace: Path, fake_llm: FakeLLMServer) -> None:
    seed_workspace(workspace)
    async with running_console(console_config(make_config), login=False) as c:
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.click("#nav a[data-view=memory]")
        await expect(page.locator("#file-pane .md li").first).to_have_text("Likes tea")
        await expect(page.locator("#agent-box")).to_be_hidden()
        assert page.errors == []  # type: ignore[attr-defined]

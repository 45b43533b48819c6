"""The console's Approvals view in a real browser: a held action shows up with what it is and
why it waits, Approve once runs it once and moves it to the decided list (who, when), Deny
runs nothing, and a held request's quoted untrusted words stay text, never markup."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from lucidgate.gateway.approvals import ApprovalRequest
from tests.browser.conftest import Shots
from tests.browser.test_console_browser import log_in, open_page
from tests.console_kit import console_config, running_console
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls
from tests.security.test_approvals_console import pending

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture
def config(make_config: Any, fake_llm: FakeLLMServer) -> Any:
    # ``always``: the console chat is the owner's own, so only this mode holds its exec.
    return console_config(make_config, tools={"approvals": "always", "exec": {"sandbox": "off"}})


async def test_approve_once_runs_the_held_action_and_moves_it_to_decided(
        browser: Any, shots: Shots, config: Any, fake_llm: FakeLLMServer, workspace: Path) -> None:
    fake_llm.queue(ToolCalls([("exec", {"command": "echo ran >> pwned.txt"}),
                              ("exec", {"command": "echo no >> denied.txt"})]),
                   Reply("Both asked."), Reply("It ran."), Reply("It was not run."))
    async with running_console(config) as c:
        posted = await c.client.post("/api/console/chats/tab-1/messages", json={"text": "do both"}, headers=c.unsafe)
        assert posted.status_code in (200, 202), posted.text
        listed = await pending(c.client, 2)
        run = next(a for a in listed if "pwned" in a["arguments"])
        skip = next(a for a in listed if "denied" in a["arguments"])
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.click("#nav a[data-view=approvals]")
        held = page.locator(f"#approvals-pending li[data-id='{run['id']}']")
        await expect(held.locator(".action")).to_have_text('exec {"command":"echo ran >> pwned.txt"}')
        await expect(held).to_contain_text("from web:tab-1 (private)")
        await expect(held.locator(".why")).to_contain_text('tools.approvals is "always"')
        await shots.take(page, "approvals-pending")
        assert not (workspace / "pwned.txt").exists()

        await held.get_by_role("button", name=f"Approve once {run['id']}").click()
        done = page.locator(f"#approvals-decided tr[data-id='{run['id']}']")
        await expect(done.locator(".outcome")).to_have_text("approved — ran once")
        await expect(done.locator(".by")).to_have_text("console:console")
        await expect(page.locator(f"#approvals-pending li[data-id='{run['id']}']")).to_have_count(0)

        await page.locator(f"#approvals-pending li[data-id='{skip['id']}']").get_by_role(
            "button", name=f"Deny {skip['id']}").click()
        await expect(page.locator(f"#approvals-decided tr[data-id='{skip['id']}'] .outcome")).to_have_text("denied")
        await expect(page.locator("#no-approvals")).to_be_visible()
        await shots.take(page, "approvals-decided")
        await c.parts.agent.idle()
        approvals = c.parts.approvals
        assert approvals is not None
        ran, refused = approvals.find(run["id"]), approvals.find(skip["id"])
    assert ran is not None and (ran.status, ran.decided_by) == ("done", "console:console")
    assert ran.decided_at is not None and ran.created_at <= ran.decided_at
    assert refused is not None and refused.status == "denied"
    assert (workspace / "pwned.txt").read_text() == "ran\n"  # once
    assert not (workspace / "denied.txt").exists()
    assert page.errors == []  # type: ignore[attr-defined]


async def test_the_quoted_untrusted_words_are_shown_as_text_never_as_markup(
        browser: Any, shots: Shots, config: Any) -> None:
    async with running_console(config, login=False) as c:
        approvals = c.parts.approvals
        assert approvals is not None
        now = time.time()
        # Held as a group turn would be: the guest's words are the quote (and appear in the action).
        request = ApprovalRequest.new(
            tool="exec", arguments='{"command":"echo \\"<img src=x onerror=alert(2)>\\""}',
            session_key="telegram:-100", channel="telegram", chat_id="-100", chat_type="group",
            sender_id="42", origin="a guest's message in telegram:-100 (user <b>43</b>)", quote=HOSTILE,
            created_at=now, expires_at=now + 3600)
        await asyncio.to_thread(approvals.store.add, request)
        page = await open_page(browser, shots, c)
        dialogs: list[str] = []
        page.on("dialog", lambda d: dialogs.append(d.message))
        await log_in(page, shots)
        await page.goto("/#approvals")
        held = page.locator(f"#approvals-pending li[data-id='{request.id}']")
        await expect(held.locator(".quote")).to_have_text(HOSTILE)
        await expect(held.locator(".why")).to_contain_text("(user <b>43</b>)")
        await expect(held.locator(".action")).to_contain_text("<img src=x onerror=alert(2)>")
        await shots.take(page, "approvals-hostile")
        assert await page.locator("#view img, #view b, #view script").count() == 0
    assert dialogs == []
    assert page.errors == []  # type: ignore[attr-defined]


async def test_the_approvals_view_fits_a_phone_without_sideways_scrolling(
        browser: Any, shots: Shots, config: Any) -> None:
    long_command = '{"command":"echo ' + "x" * 300 + '"}'
    async with running_console(config, login=False) as c:
        approvals = c.parts.approvals
        assert approvals is not None
        now = time.time()
        held, decided = (ApprovalRequest.new(
            tool="exec", arguments=long_command, session_key="telegram:-1001234567890", channel="telegram",
            chat_id="-1001234567890", chat_type="group", sender_id="42", origin="a guest's message",
            quote="y" * 200, created_at=now, expires_at=now + 3600) for _ in range(2))
        await asyncio.to_thread(approvals.store.add, held)
        await asyncio.to_thread(approvals.store.add, decided)
        await asyncio.to_thread(approvals.store.update, decided, status="denied", decided_by="telegram:42",
                                decided_at=now)
        page = await open_page(browser, shots, c, width=375, height=740)
        await log_in(page, shots)
        await page.goto("/#approvals")
        await expect(page.locator(f"#approvals-pending li[data-id='{held.id}'] .quote")).to_be_visible()
        await expect(page.locator(f"#approvals-decided tr[data-id='{decided.id}'] .by")).to_have_text("telegram:42")
        await shots.take(page, "phone-approvals")
        overflow = await page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        buttons = await page.locator(f"#approvals-pending li[data-id='{held.id}'] button").evaluate_all(
            "els => els.map(b => b.getBoundingClientRect().right)")
    assert overflow <= 0, f"the Approvals view scrolls sideways by {overflow}px at 375px"
    assert len(buttons) == 2 and max(buttons) <= 375
    assert page.errors == []  # type: ignore[attr-defined]

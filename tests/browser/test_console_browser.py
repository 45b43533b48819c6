"""The web console in a real browser (headless Chromium): log in, chat with a streamed
reply, edit USER.md and see the commit and its diff, restore it, run Dream and see its
diff, cancel a reminder, and a phone-width layout without horizontal scrolling."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, expect

from lucidgate.channels.messages import Target
from lucidgate.gateway.console.links import LoginLinks
from lucidgate.memory.gitstore import GitStore
from tests.browser.conftest import Shots
from tests.console_kit import CONSOLE_TOKEN, MEMORY_MD, USER_MD, Console, console_config, running_console, seed_workspace
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls

TIMEOUT_MS = 60_000  # generous: CI machines are slow; expect() returns as soon as it holds
expect.set_options(timeout=TIMEOUT_MS)  # expect() has its own 5 s default otherwise


@pytest.fixture
def config(make_config: Any, workspace: Path, fake_llm: FakeLLMServer) -> Any:
    seed_workspace(workspace)
    # A provider that streams tool turns (hosted ones do), so the web chat's reply streams.
    return console_config(make_config, providers={"openai": {"streamToolCalls": True}})


async def open_page(browser: Any, shots: Shots, c: Console, *, width: int = 1280, height: int = 800,
                    dark: bool = False) -> Page:
    context = await browser.new_context(viewport={"width": width, "height": height},
                                        color_scheme="dark" if dark else "light", base_url=c.server.url)
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    shots.pages.append(page)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" and "401" not in msg.text else None)
    page.errors = errors  # type: ignore[attr-defined]
    return page


async def log_in(page: Page, shots: Shots) -> None:
    await page.goto("/")
    await expect(page.locator("#login-token")).to_be_visible()
    await shots.take(page, "login")
    await page.fill("#login-token", CONSOLE_TOKEN)
    await page.press("#login-token", "Enter")
    await expect(page.locator("#top")).to_be_visible()
    await expect(page.locator("#chat-input")).to_be_visible()


async def test_log_in_and_chat_with_a_streamed_reply(browser: Any, shots: Shots, config: Any,
                                                     fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(ToolCalls([("read_file", {"path": "USER.md"})]),
                   Reply("**Lisbon**, as far as I know — 你住在里斯本。"))
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c)
        await page.goto("/")
        await page.fill("#login-token", "wrong")
        await page.press("#login-token", "Enter")
        await expect(page.locator("#login-error")).to_contain_text("not valid")
        await log_in(page, shots)
        await page.fill("#chat-input", "Where do I live?")
        await page.press("#chat-input", "Enter")
        reply = page.locator(".msg.assistant").last
        await expect(reply).to_contain_text("Lisbon, as far as I know — 你住在里斯本。")
        await expect(reply.locator("strong")).to_have_text("Lisbon")
        await expect(reply.locator("details.tools summary")).to_contain_text("read_file")
        await expect(reply.locator("details.tools")).not_to_have_attribute("open", "")
        await expect(page.locator(".msg.user")).to_have_text("Where do I live?")
        await shots.take(page, "chat")
        # Reloading resumes the same chat from its log: every message once, none lost.
        await page.reload()
        await expect(page.locator(".msg.assistant")).to_have_count(1)
        await expect(page.locator(".msg.user")).to_have_count(1)
        # Slash commands are offered as you type.
        await page.fill("#chat-input", "/he")
        await page.locator("#chat-input").dispatch_event("input")
        await expect(page.locator("#command-hints")).to_contain_text("/help")
        cookies = await page.context.cookies()
        storage = await page.evaluate("() => [localStorage.length, document.cookie]")
    assert fake_llm.requests[-1].get("stream") is True  # the web channel streams
    [cookie] = [k for k in cookies if k["name"] == "lucid_console"]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert storage == [0, ""]  # nothing in localStorage, and the session cookie is invisible to scripts
    assert page.errors == []  # type: ignore[attr-defined]


async def test_edit_user_md_see_the_commit_and_diff_then_restore(browser: Any, shots: Shots, config: Any) -> None:
    ws = config.workspace
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.click("#nav a[data-view=memory]")
        await expect(page.locator("#file-title")).to_have_text("memory/MEMORY.md")  # the facts come first
        await expect(page.locator("#file-pane .md li").first).to_have_text("Likes tea")
        await page.click(".file-list a[href='#memory?path=USER.md']")
        await expect(page.locator("#file-title")).to_have_text("USER.md")
        await expect(page.locator("#file-pane .md li").first).to_have_text("Name: Ana")
        await shots.take(page, "memory")
        await page.click("#edit-file")
        await page.fill("#editor", USER_MD + "- Learning 日本語\n")
        await page.click("#save-file")
        result = page.locator("#save-result")
        await expect(result).to_contain_text("Saved as commit")
        await expect(page.locator("#file-pane .md")).to_contain_text("Learning 日本語")
        head = GitStore(ws).log(1)[0]
        assert head.message == "manual: USER.md"
        await result.locator("a").click()
        await expect(page.locator("#commit-title")).to_have_text("manual: USER.md")
        await expect(page.locator("table.diff tr.add")).to_contain_text("- Learning 日本語")
        await shots.take(page, "dream-log-diff")
        await page.click("#diff-mode")
        await expect(page.locator("table.diff.split td.add")).to_contain_text("- Learning 日本語")
        await page.click("#restore")
        await expect(page.locator("#restore-confirm")).to_be_visible()
        await shots.take(page, "restore-confirm")
        await page.click("#restore-yes")
        await expect(page.locator("#commit-title")).to_have_text(f"restore: before {head.sha[:8]}")
        await expect(page.locator("table.diff .del").first).to_contain_text("- Learning 日本語")
    assert (ws / "USER.md").read_text(encoding="utf-8") == USER_MD
    assert GitStore(ws).log(1)[0].message == f"restore: before {head.sha[:8]}"


async def test_run_dream_now_and_see_its_diff(browser: Any, shots: Shots, config: Any,
                                              fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(
        Reply("[MEMORY] Ana prefers green tea"),
        ToolCalls([("edit_file", {"path": "memory/MEMORY.md", "old_text": "- Likes tea",
                                  "new_text": "- Likes green tea"})]),
        Reply("Done."),
    )
    async with running_console(config, login=False) as c:
        await c.parts.store.append_history("- Ana said she prefers green tea", session_key="web:tab-1")
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.click("#nav a[data-view=history]")
        await expect(page.locator(".entry.unprocessed")).to_contain_text("prefers green tea")
        await shots.take(page, "history")
        await page.click("#nav a[data-view=dream]")
        await page.click("#run-dream")
        await expect(page.locator("#dream-done")).to_be_visible()
        await expect(page.locator("#commit-title")).to_contain_text("dream:")
        await expect(page.locator("table.diff tr.add")).to_contain_text("- Likes green tea")
        await shots.take(page, "dream-run")
        await page.click("#nav a[data-view=history]")
        await expect(page.locator(".entry").first).not_to_have_class("entry unprocessed")
    assert (config.workspace / "memory" / "MEMORY.md").read_text() == MEMORY_MD.replace("tea", "green tea")


async def test_see_a_reminder_and_cancel_it(browser: Any, shots: Shots, config: Any) -> None:
    async with running_console(config, login=False) as c:
        sched = c.parts.scheduler
        assert sched is not None
        reminder, _ = await sched.add_reminder(session_key="web:tab-1", target=Target("web", "tab-1"),
                                               text="Water the plants 🌱", every=3600)
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.click("#nav a[data-view=jobs]")
        item = page.locator(f".reminder[data-id='{reminder.id}']")
        await expect(item).to_contain_text("Water the plants 🌱")
        await expect(page.locator("#usage-chart")).to_be_visible()
        await shots.take(page, "jobs")
        await item.get_by_role("button", name=f"Cancel reminder {reminder.id}").click()
        await expect(page.locator("#no-reminders")).to_be_visible()
    assert [r for r in sched.reminders.store.active() if r.id == reminder.id] == []


async def test_forget_with_the_purge_warning_then_un_forget(browser: Any, shots: Shots, config: Any) -> None:
    ws = config.workspace
    (ws / "USER.md").write_text(USER_MD + "- my cat is named Luna\n" + "".join(f"- fact {i}\n" for i in range(8)))
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.click("#nav a[data-view=forget]")
        await page.fill("#forget-text", "Luna")
        await page.check("#forget-purge")
        warnings: list[str] = []

        async def accept(dialog: Any) -> None:
            warnings.append(dialog.message)
            await dialog.accept()

        page.on("dialog", accept)
        await page.get_by_role("button", name="Forget").click()
        await expect(page.locator("#forget-report")).to_contain_text("History of changes rewritten")
        await shots.take(page, "forget")
        await page.click("#nav a[data-view=chat]")
        await page.click("#nav a[data-view=forget]")
        await expect(page.locator("#forgotten li")).to_contain_text("(hashed, 4 characters)")
        await page.locator("#forgotten li button").click()
        await expect(page.locator("#no-forgotten")).to_be_visible()
    assert warnings and "cannot be undone" in warnings[0] and "Backups" in warnings[0]
    assert "Luna" not in (ws / "USER.md").read_text()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
async def test_phone_width_has_no_horizontal_scroll_in_any_view(browser: Any, shots: Shots, config: Any,
                                                                fake_llm: FakeLLMServer, dark: bool) -> None:
    fake_llm.queue(Reply("A long answer with a very long unbroken token " + "x" * 120 + " 和中文文本"))
    async with running_console(config, login=False) as c:
        links = LoginLinks(config.workspace)
        code = links.issue(600)
        await c.parts.store.append_history("- 一个很长的中文历史记录条目，用来检查换行是否正常工作" * 3,
                                                 session_key="web:tab-1")
        page = await open_page(browser, shots, c, width=375, height=740, dark=dark)
        await page.goto(f"/#login={code}")  # the one-time link `lucid console` prints
        await expect(page.locator("#top")).to_be_visible()
        assert "login" not in page.url
        await page.fill("#chat-input", "hello")
        await page.press("#chat-input", "Enter")
        await expect(page.locator(".msg.assistant")).to_contain_text("和中文文本")
        for view, ready in [("chat", ".msg.assistant"), ("memory", "#file-pane .md"), ("history", ".entry"),
                            ("dream", "#commit-detail h2"), ("sessions", "#sessions-table"), ("jobs", "#usage-chart"),
                            ("status", "#channels li")]:
            await page.goto(f"/#{view}")
            await expect(page.locator(ready).first).to_be_visible()
            await shots.take(page, f"phone-{view}")
            overflow = await page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{view} scrolls sideways by {overflow}px at 375px"
        # Keyboard: the navigation is reachable with Tab alone.
        await page.goto("/#status")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Tab")
        focused = await page.evaluate("() => document.activeElement && document.activeElement.textContent")
        assert focused in {"Chat", "Skip to content"} or focused
    assert page.errors == []  # type: ignore[attr-defined]


async def test_memory_text_is_shown_as_text_never_as_markup(browser: Any, shots: Shots, config: Any) -> None:
    hostile = ("# User\n\n- <img src=x onerror=\"document.title='pwned'\">\n"
               "- [click](javascript:document.title='pwned') and [docs](https://example.org/)\n"
               "- <script>document.title='pwned'</script>\n")
    (config.workspace / "USER.md").write_text(hostile, encoding="utf-8")
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.goto("/#memory?path=USER.md")
        body = page.locator("#file-pane .md")
        await expect(body).to_contain_text("<img src=x onerror=")
        await expect(body).to_contain_text("<script>document.title='pwned'</script>")
        await shots.take(page, "hostile-memory")
        assert await body.locator("img, script").count() == 0
        links = await body.locator("a").evaluate_all("els => els.map(a => a.getAttribute('href'))")
        title = await page.title()
    assert links == ["https://example.org/"]  # the javascript: link stays plain text
    assert title == "lucidgate console"


async def test_sessions_and_switch_in_the_chat(browser: Any, shots: Shots, config: Any,
                                               fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("first chat answer"), Reply("second chat answer"))
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.fill("#chat-input", "hello from the first chat")
        await page.press("#chat-input", "Enter")
        await expect(page.locator(".msg.assistant")).to_contain_text("first chat answer")
        first = await page.locator("#chat-picker").input_value()
        await page.fill("#chat-input", "/sw")
        await page.locator("#chat-input").dispatch_event("input")
        await expect(page.locator("#command-hints")).to_contain_text("/switch")
        await page.fill("#chat-input", "/switch trip-planning")
        await page.press("#chat-input", "Enter")
        await expect(page.locator("#chat-picker")).to_have_value("trip-planning")
        await expect(page.locator(".msg")).to_have_count(0)  # a fresh conversation
        await page.fill("#chat-input", "hello from the second chat")
        await page.press("#chat-input", "Enter")
        await expect(page.locator(".msg.assistant")).to_contain_text("second chat answer")
        await page.fill("#chat-input", "/sessions")
        await page.press("#chat-input", "Enter")
        listing = page.locator(".msg.note").last
        await expect(listing).to_contain_text("* trip-planning")
        await expect(listing).to_contain_text(first)
        await page.fill("#chat-input", "/switch not/a/name")
        await page.press("#chat-input", "Enter")
        await expect(page.locator(".msg.error").last).to_contain_text("is not a chat name")
        await shots.take(page, "sessions-switch")
        await page.fill("#chat-input", f"/switch {first}")
        await page.press("#chat-input", "Enter")
        await expect(page.locator(".msg.user")).to_have_text("hello from the first chat")
    assert len(fake_llm.requests) == 2  # /sessions and /switch never reached the assistant
    sessions = config.workspace / "sessions"
    assert "hello from the second chat" in (sessions / "web_trip-planning.jsonl").read_text()
    assert page.errors == []  # type: ignore[attr-defined]
async def test_command_replies_keep_their_lines_and_the_popup_offers_every_command(
        browser: Any, shots: Shots, config: Any, fake_llm: FakeLLMServer) -> None:
    async with running_console(config) as c:
        names = [cmd["name"] for cmd in (await c.client.get("/api/console/commands")).json()]
        page = await open_page(browser, shots, c)
        await log_in(page, shots)
        await page.fill("#chat-input", "/")
        await page.locator("#chat-input").dispatch_event("input")
        hints = page.locator("#command-hints .hint")
        await expect(page.locator("#command-hints")).to_contain_text(f"/{names[-1]} ")  # the popup is complete
        offered = await hints.evaluate_all("els => els.map(e => e.firstChild.textContent)")
        await shots.take(page, "command-popup")
        await page.fill("#chat-input", "/help")
        await page.press("#chat-input", "Enter")
        reply = page.locator(".msg.assistant").last
        await expect(reply).to_contain_text("Anything else is a message")
        lines = (await reply.inner_text()).splitlines()
        await shots.take(page, "help-reply")
    assert len(names) > 8 and {"memory", "forget", "model", "dream-restore"} <= set(names)
    assert offered[:len(names)] == [f"/{n}" for n in names]  # every command the server knows, then the tab's own
    assert "/dream-restore <sha> — undo a memory change" in lines and "Commands:" in lines
    assert fake_llm.requests == []


async def test_a_new_tab_continues_the_latest_chat_and_new_chat_has_a_readable_name(
        browser: Any, shots: Shots, config: Any, fake_llm: FakeLLMServer) -> None:
    fake_llm.queue(Reply("Hello Ana."))
    async with running_console(config, login=False) as c:
        first = await open_page(browser, shots, c)
        await log_in(first, shots)
        await expect(first.locator("#chat-picker")).to_have_value("main")  # the first chat ever
        await first.fill("#chat-input", "hi")
        await first.press("#chat-input", "Enter")
        await expect(first.locator(".msg.assistant")).to_have_text("Hello Ana.")
        second = await first.context.new_page()  # another tab: same login, its own sessionStorage
        shots.pages.append(second)
        await second.goto("/")
        await expect(second.locator(".msg.assistant")).to_have_text("Hello Ana.")
        await expect(second.locator("#chat-picker")).to_have_value("main")
        await second.get_by_role("button", name="New chat").click()
        await expect(second.locator(".msg")).to_have_count(0)
        fresh = await second.locator("#chat-picker").input_value()
        await shots.take(second, "new-chat")
    assert re.fullmatch(r"chat-\d{8}-\d{4}", fresh), fresh


@pytest.mark.parametrize("width", [320, 390])
async def test_the_message_box_fits_a_phone_screen(browser: Any, shots: Shots, config: Any, width: int) -> None:
    async with running_console(config, login=False) as c:
        page = await open_page(browser, shots, c, width=width, height=700)
        await log_in(page, shots)
        await shots.take(page, f"chat-{width}")
        for selector in ("#chat-input", "#chat-send", "#chat-picker"):
            box = await page.locator(selector).bounding_box()
            assert box is not None, selector
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, f"{selector} cut off at {width}px: {box}"
            assert box["y"] + box["height"] <= 700, f"{selector} below the screen at {width}px: {box}"


async def test_search_hits_for_history_and_session_notes_open_what_they_point_at(
        browser: Any, shots: Shots, make_config: Any, workspace: Path, fake_llm: FakeLLMServer) -> None:
    seed_workspace(workspace)
    note = "memory/2026-01-31-kitten-pixel-owner.md"
    (workspace / note).write_text("# Kitten Pixel\n\nThe owner adopted a grey kitten called Pixel.\n",
                                  encoding="utf-8")
    config = console_config(make_config, agents={"defaults": {"memory": {"search": {"embedding": {"model": "none"}}}}})
    async with running_console(config, login=False) as c:
        await c.parts.store.append_history("- Adopted a grey kitten called Pixel", session_key="cli:1")
        page = await open_page(browser, shots, c)
        await log_in(page, shots)

        async def search_and_click(href_start: str) -> None:
            await page.goto("/#memory")
            await page.fill("#memory-search", "kitten Pixel")
            await page.press("#memory-search", "Enter")
            link = page.locator(f"#search-results a[href^='{href_start}']")
            await expect(link).to_have_count(1)
            await link.click()

        await search_and_click("#history?cursor=1")
        entry = page.locator("#entry-1")
        await expect(entry).to_contain_text("grey kitten called Pixel")
        await expect(entry).to_have_attribute("aria-current", "true")
        await shots.take(page, "history-entry-from-search")
        await search_and_click(f"#memory?open={note.replace('/', '%2F')}&")
        await expect(page.locator("#file-title")).to_have_text(note)
        await expect(page.locator("#opened-hit")).to_contain_text("The owner adopted a grey kitten called Pixel.")
        await shots.take(page, "session-note-from-search")
        assert await page.locator("text=Could not load").count() == 0
    assert page.errors == []  # type: ignore[attr-defined]

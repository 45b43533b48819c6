"""Headless Chromium for the console's browser tests: Debian's ``chromium`` driven by
Playwright (its own browser download is not used). Each test collects a screenshot of
every view it visits; when the test fails (or ``LUCID_SCREENSHOTS_ALWAYS`` is set) they are
written to ``$LUCID_SCREENSHOTS`` (default ``test-artifacts/screenshots/<test>/``) so a
failure can be seen, not guessed."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.real_tools import need_tool

CHROMIUM = os.environ.get("LUCID_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = Path(os.environ.get("LUCID_SCREENSHOTS", Path(__file__).parents[2] / "test-artifacts" / "screenshots"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


class Shots:
    """Screenshots taken along the way, written out only if the test fails."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, bytes]] = []
        self.pages: list[Any] = []

    async def take(self, page: Any, name: str) -> None:
        self.taken.append((name, await page.screenshot(full_page=True)))

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for i, (name, data) in enumerate(self.taken):
            (folder / f"{i:02d}-{name}.png").write_bytes(data)


@pytest_asyncio.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    path = need_tool("chromium", CHROMIUM)
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=path, args=ARGS, headless=True)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture
async def shots(request: pytest.FixtureRequest) -> AsyncIterator[Shots]:
    kit = Shots()
    yield kit
    report = getattr(request.node, "report_call", None)
    failed = report is not None and report.failed
    if failed or os.environ.get("LUCID_SCREENSHOTS_ALWAYS"):
        for i, page in enumerate(kit.pages if failed else []):
            try:
                kit.taken.append((f"at-failure-{i}", await page.screenshot(full_page=True)))
            except Exception:  # noqa: BLE001 - the page may be gone; keep what we have
                pass
        kit.write(SHOTS / re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name))


@pytest.fixture(scope="session", autouse=True)
def _litellm_imported() -> None:
    """Import litellm before the first page waits on a reply (a cold import takes seconds)."""
    from lucidgate.gateway.model.client import import_litellm

    import_litellm()

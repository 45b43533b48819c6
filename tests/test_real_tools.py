"""The one rule for tests that need a system program: skip with a reason on a bare machine,
fail when ``LUCID_REQUIRE_REAL=1`` (CI) — so a green CI run really ran them."""

from __future__ import annotations

import pytest

from tests.real_tools import need_tool


def test_a_missing_program_skips_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LUCID_REQUIRE_REAL", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.skip.Exception, match=r"needs bwrap: apt-get install bubblewrap"):
        need_tool("bwrap")


def test_under_require_real_a_missing_program_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LUCID_REQUIRE_REAL", "1")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match=r"needs systemd-analyze.*LUCID_REQUIRE_REAL=1"):
        need_tool("systemd-analyze", "/nonexistent/systemd-analyze")


def test_a_present_program_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    program = tmp_path / "chromium"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert need_tool("chromium") == str(program)
    assert need_tool("chromium", str(program)) == str(program)


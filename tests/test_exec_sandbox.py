"""exec inside bubblewrap (Debian's ``bubblewrap``, installed by .ci/run): what a command can
see and touch, and the choice between sandboxed and direct runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lucidgate.gateway.tools._sandbox import SandboxUnavailable, choose_sandbox, describe
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.shell import ExecTool
from lucidgate.gateway.tools.turn import TurnContext
from tests.fakes.context import make_ctx

needs_bwrap = pytest.mark.needs("bwrap")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "MEMORY.md").write_text("a fact\n")
    return root


async def run(ctx: TurnContext, command: str, **settings: object) -> str:
    registry = ToolRegistry([ExecTool(timeout_s=20, **settings)])  # type: ignore[arg-type]
    return await registry.execute(ctx, "exec", json.dumps({"command": command}))


@needs_bwrap
async def test_the_sandbox_confines_writes_homes_tmp_and_processes(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    secret_home = Path.home() / ".lucidgate-sandbox-probe"
    secret_home.write_text("config with a token")
    try:
        out = await run(make_ctx(ws), (
            "echo written > note.txt; cat MEMORY.md; pwd; echo HOME=$HOME; "
            f"cat {outside} 2>&1 || echo outside-hidden; echo x > {outside}; "
            "echo y > /var/lucid-probe 2>&1 || echo var-read-only; "
            f"cat {secret_home} 2>&1 || echo home-hidden; "
            "touch /usr/lucid-probe 2>&1 || echo system-read-only; "
            "echo pid=$$; ls /proc | grep -c '^[0-9]'"), sandbox="bwrap")
    finally:
        secret_home.unlink()
    assert (ws / "note.txt").read_text() == "written\n"  # the workspace is read-write
    assert "a fact" in out and f"\n{ws.resolve()}\n" in out and f"HOME={ws.resolve()}" in out
    # Outside the workspace: /tmp is private (the host's file is neither seen nor changed)
    # and everything else is read-only.
    assert "outside-hidden" in out and "keep me" not in out and outside.read_text() == "keep me"
    assert "var-read-only" in out and not Path("/var/lucid-probe").exists()
    assert "home-hidden" in out and "config with a token" not in out
    assert "system-read-only" in out and not Path("/usr/lucid-probe").exists()
    lines = out.splitlines()
    assert "pid=2" in out or "pid=1" in out  # its own pid namespace
    assert int(lines[-2].strip()) < 10  # it sees only its own few processes, not the gateway's


@needs_bwrap
async def test_network_can_be_switched_off(ws: Path) -> None:
    listing = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"
    on = await run(make_ctx(ws), listing, sandbox="bwrap")
    off = await run(make_ctx(ws), listing, sandbox="bwrap", network=False)
    def interfaces(out: str) -> list[str]:
        return [line for line in out.splitlines() if line and not line.startswith("[")]

    assert interfaces(off) == ["lo"]  # only loopback: no way out
    assert len(interfaces(on)) > 1  # the host's interfaces


@needs_bwrap
async def test_auto_picks_bubblewrap_where_it_works_and_status_says_so() -> None:
    box = choose_sandbox("auto")
    assert box.active and "bubblewrap" in box.reason
    assert describe("auto", True) == (True, box.reason)


def test_without_bubblewrap_auto_runs_directly_and_bwrap_refuses(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-bwrap")
    box = choose_sandbox("auto", which=missing)
    assert not box.active and box.reason.startswith("off:")
    assert box.argv("echo hi", tmp_path) == ["/bin/sh", "-c", "echo hi"]
    with pytest.raises(SandboxUnavailable, match="tools.exec.sandbox is 'bwrap'"):
        choose_sandbox("bwrap", which=missing)
    off = choose_sandbox("off")
    assert not off.active and "off" in off.reason


async def test_a_required_sandbox_that_cannot_run_refuses_the_command(ws: Path, monkeypatch) -> None:
    monkeypatch.setattr("lucidgate.gateway.tools._sandbox.shutil.which", lambda name: None)
    out = await run(make_ctx(ws), "touch ran", sandbox="bwrap")
    assert out.startswith("Error: tools.exec.sandbox is 'bwrap' but bwrap is not installed")
    assert not (ws / "ran").exists()

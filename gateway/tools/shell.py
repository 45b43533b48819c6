"""The exec tool: run a shell command in the workspace, owner only (DESIGN §8, §9).

The command runs in its own session and process group (``start_new_session``), with the
workspace as working directory, an allow-listed environment and — where bubblewrap works
— inside a sandbox (gateway/tools/_sandbox.py). When
it times out, when the turn is cancelled (``/stop``) and when the shell returns, the whole
process group is stopped — SIGTERM, a short grace, then SIGKILL — so nothing it started
lingers. Output (stdout and stderr together) is capped, keeping its head and tail.

``restrictToWorkspace`` does not confine this tool: it only sets the working directory.
Anything meant to outlive the command (a server) must leave the group itself (``setsid``,
systemd). Orphans are reaped by PID 1; in a container, run with an init (``--init``/tini)
or they stay as zombies — harmless, and not counted as running here.

The deny-list (``dangerous_reason``) is a seatbelt against obvious accidents (``rm -rf /``,
``mkfs``, ``curl | sh``...), **not a sandbox**: a determined command can always be phrased
past it. The boundaries are that only the owner may use this tool, and bubblewrap.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from lucidgate.config.schema import ExecConfig
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools._deny import dangerous_reason  # noqa: F401  (re-exported)
from lucidgate.gateway.tools._owner_paths import sandbox_read_only
from lucidgate.gateway.tools._sandbox import Sandbox, SandboxUnavailable, choose_sandbox, exec_env
from lucidgate.gateway.tools.base import ToolParams
from lucidgate.gateway.tools.turn import TurnContext

logger = logging.getLogger(__name__)

MAX_COMMAND_CHARS = 10_000
_TERM_GRACE_S = 2.0
_KILL_GRACE_S = 2.0
# After the shell exits, how long background children may keep the output pipe open.
_DRAIN_GRACE_S = 1.0
_SETTLE_S = 0.5


class ExecTool:
    name: ClassVar[str] = "exec"
    description: ClassVar[str] = (
        "Run a shell command in the workspace; returns output and exit code."
    )
    owner_only: ClassVar[bool] = True
    owner_power: ClassVar[bool] = True  # any command can write anything the owner can

    class Params(ToolParams):
        command: str
        timeout_s: int = Field(0, ge=0, description="at most the default")

    def __init__(self, *, timeout_s: float = ExecConfig.default_of("timeout_s"),
                 max_output_chars: int = ExecConfig.default_of("max_output_chars"),
                 term_grace_s: float = _TERM_GRACE_S, sandbox: str = ExecConfig.default_of("sandbox"),
                 network: bool = ExecConfig.default_of("network"),
                 pass_env: Sequence[str] = (), hide: Sequence[Path] = (), confined: bool = False) -> None:
        self.timeout_s = timeout_s
        self.hide = tuple(hide)  # folders a sandboxed command must not see (the config's, other agents')
        # Run only inside the sandbox (several agents: unconfined, a command could read the
        # other agents' workspaces, which no check of the command line can rule out).
        self.confined = confined
        self.max_output_chars = max_output_chars
        self.term_grace_s = term_grace_s
        self.sandbox_mode = sandbox
        self.network = network
        self.pass_env = tuple(pass_env)
        self._sandbox: Sandbox | None = None

    async def sandbox(self) -> Sandbox:
        """Chosen on first use (probing bubblewrap runs a process: not at import, not on the loop)."""
        if self._sandbox is None:
            try:
                self._sandbox = await asyncio.to_thread(choose_sandbox, self.sandbox_mode, network=self.network)
            except SandboxUnavailable as exc:
                raise ToolError(f"{exc}; nothing was run") from None
            logger.info("exec sandbox: %s", self._sandbox.reason)
        return self._sandbox

    async def run(self, ctx: TurnContext, params: Params) -> str:
        if not params.command.strip():
            raise ToolError("command is empty")
        if len(params.command) > MAX_COMMAND_CHARS:
            raise ToolError(f"command is over {MAX_COMMAND_CHARS} characters; write a script file and run it")
        reason = dangerous_reason(params.command)
        if reason:
            logger.warning("exec refused in %s: %s", ctx.session_key, reason)
            raise ToolError(f"command refused: {reason}. Nothing was run.")
        timeout = min(self.timeout_s, params.timeout_s) if params.timeout_s else self.timeout_s
        box = await self.sandbox()
        if self.confined and not box.active:
            raise ToolError("with several agents, exec runs only inside the sandbox, which is not available "
                            f"here ({box.reason}); nothing was run")
        read_only = await asyncio.to_thread(sandbox_read_only, ctx.workspace) if box.active else []
        capture = _Capture(self.max_output_chars)
        loop = asyncio.get_running_loop()
        # A protocol rather than create_subprocess_exec: Process.wait() only returns once
        # the output pipe closes too, and a background child can hold it open for hours.
        starting = asyncio.ensure_future(loop.subprocess_exec(
            lambda: _ExecProtocol(capture),
            *box.argv(params.command, ctx.workspace, hide=self.hide, read_only=read_only),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=ctx.workspace,
            env=exec_env(os.environ, self.pass_env),
            start_new_session=True,
        ))
        try:
            transport, proto = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Cancelled (/stop) while the process was starting: asyncio's own clean-up would
            # kill only the shell and leave its children running. Let the start finish, then
            # stop the whole group.
            await self._stop_started(starting)
            raise
        pgid = transport.get_pid()  # a new session's leader is its own process group
        timed_out = lingering = False
        try:
            started = time.monotonic()
            done, _ = await asyncio.wait({proto.exited}, timeout=timeout)
            timed_out = not done
            if not timed_out:
                remaining = timeout - (time.monotonic() - started)
                await asyncio.wait({proto.closed}, timeout=max(0.05, min(_DRAIN_GRACE_S, remaining)))
                lingering = await _still_running(pgid, _SETTLE_S)
        finally:
            await self._end(transport, proto)
        return self._report(capture.text(), transport.get_returncode(), timed_out, timeout, lingering)

    async def _stop_started(self, starting: asyncio.Future[tuple[Any, _ExecProtocol]]) -> None:
        """Wait for a start that was cancelled half-way, then stop what it started."""
        try:
            transport, proto = await starting
        except Exception:
            return  # it never started
        await self._end(transport, proto)

    async def _end(self, transport: Any, proto: _ExecProtocol) -> None:
        """Stop the whole process group (a new session's leader is its group), then free the pipes."""
        try:
            await stop_process_group(proto, transport.get_pid(), term_grace_s=self.term_grace_s)
            # The group is gone, so the pipe is closed: the last output arrives promptly.
            await asyncio.wait({proto.closed}, timeout=1.0)
        finally:
            transport.close()

    def _report(self, output: str, code: int | None, timed_out: bool, timeout: float,
                lingering: bool) -> str:
        parts = [output.rstrip("\n") if output.strip() else "(no output)"]
        if timed_out:
            parts.append(f"[timed out after {timeout:g} s; the command and its children were killed]")
        else:
            parts.append(f"[exit code {code}]")
            if lingering:
                parts.append("[background processes it left running were stopped]")
        return "\n".join(parts)


class _ExecProtocol(asyncio.SubprocessProtocol):
    """Collects output and exposes two moments: the shell exited; all output is in."""

    def __init__(self, capture: _Capture) -> None:
        loop = asyncio.get_running_loop()
        self.capture = capture
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.capture.feed(data if isinstance(data, bytes) else data.encode())

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        # Called once the process has exited and every pipe is closed.
        if not self.closed.done():
            self.closed.set_result(None)


class _Capture:
    """Keep the head and the tail of the output within ``limit`` characters, count the rest.

    The tail usually holds the error, the head the context; the middle is what we drop.
    Bytes are bounded as they arrive, so a runaway command cannot exhaust memory.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        # 4 bytes per character is UTF-8's worst case: enough bytes for `limit` characters.
        self._half_bytes = max(1, limit // 2) * 4

    def feed(self, chunk: bytes) -> None:
        self._total += len(chunk)
        room = self._half_bytes - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self._half_bytes:
                del self._tail[: len(self._tail) - self._half_bytes]

    def text(self) -> str:
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        kept = len(self._head) + len(self._tail)
        if kept == self._total and len(head) + len(tail) <= self.limit:
            return head + tail
        half = self.limit // 2
        head, tail = head[:half], tail[-half:] if half else ""
        dropped = self._total - len(head.encode()) - len(tail.encode())
        return f"{head}\n…[output truncated: about {dropped} bytes omitted]…\n{tail}"


async def stop_process_group(proto: _ExecProtocol, pgid: int, *,
                             term_grace_s: float = _TERM_GRACE_S) -> None:
    """SIGTERM the group, wait a little, SIGKILL what is left.

    Safe under cancellation: if this coroutine is itself cancelled mid-way, the group still
    gets a SIGKILL before the CancelledError propagates.
    """
    try:
        if not await group_alive(pgid):
            return
        _signal_group(pgid, signal.SIGTERM)
        if await _wait_gone(proto, pgid, term_grace_s):
            return
        logger.info("process group %d ignored SIGTERM; sending SIGKILL", pgid)
        _signal_group(pgid, signal.SIGKILL)
        await _wait_gone(proto, pgid, _KILL_GRACE_S)
    finally:
        if not proto.exited.done() or _group_exists(pgid):
            _signal_group(pgid, signal.SIGKILL)


async def _wait_gone(proto: _ExecProtocol, pgid: int, grace: float) -> bool:
    deadline = time.monotonic() + grace
    done, _ = await asyncio.wait({proto.exited}, timeout=grace)
    if not done:
        return False
    # The kernel has no "group is empty" event; poll briefly for the last members to exit.
    while await group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _still_running(pgid: int, settle_s: float) -> bool:
    """The group still has running members after a short settle time (a sandbox's own
    processes take a moment to follow the shell out; that is not a leftover)."""
    deadline = time.monotonic() + settle_s
    while await group_alive(pgid):
        if time.monotonic() > deadline:
            return True
        await asyncio.sleep(0.02)
    return False


async def group_alive(pgid: int) -> bool:
    """True while a process of the group is still running.

    Zombies do not count: they have exited and only wait for their parent to collect them.
    Orphans are collected by PID 1, and a container whose PID 1 does not reap (no
    ``--init``) keeps them as zombies forever, which would otherwise look like a live group.
    """
    if not _group_exists(pgid):
        return False
    if not os.path.isdir("/proc/self"):
        return True
    return await asyncio.to_thread(_has_running_member, pgid)


def _has_running_member(pgid: int) -> bool:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


# ------------------------------------------------------------------ dangerous commands
# A guard rail against accidents, not a sandbox (see the module docstring).

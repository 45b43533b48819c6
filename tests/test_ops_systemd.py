"""systemd integration: sd_notify over a real unix datagram socket, the watchdog riding the
event loop, SIGHUP draining like SIGTERM, and the unit's hardening as systemd rates it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lucidgate.gateway.daemon.sdnotify import Notifier
from lucidgate.gateway.ops.unit import UnitSpec, render_unit, shipped_unit
from lucidgate.gateway.daemon.serve import GatewayServer
from tests.test_shutdown import GatewayProcess, _env
from tests.real_tools import need_tool

REPO = Path(__file__).resolve().parent.parent


class NotifySocket:
    """What systemd listens on: a bound unix datagram socket; collects what arrives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))

    def env(self, watchdog_usec: int | None = None) -> dict[str, str]:
        env = {"NOTIFY_SOCKET": str(self.path)}
        if watchdog_usec is not None:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        return env

    def recv(self, timeout: float) -> dict[str, str] | None:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except (TimeoutError, socket.timeout):
            return None
        return dict(line.split("=", 1) for line in data.decode().splitlines())

    def drain(self) -> int:
        self.sock.setblocking(False)
        count = 0
        try:
            while True:
                self.sock.recv(4096)
                count += 1
        except BlockingIOError:
            return count

    def collect(self) -> None:
        """Read continuously in a thread, as systemd does (the kernel queues only ~10
        datagrams; a reader that falls behind makes the sender drop messages)."""
        self.received: list[dict[str, str]] = []
        self._seen = 0
        self._cond = threading.Condition()

        def run() -> None:
            while True:
                try:
                    got = self.recv(0.2)
                except OSError:  # closed at teardown
                    return
                if got is not None:
                    with self._cond:
                        self.received.append(got)
                        self._cond.notify_all()

        threading.Thread(target=run, daemon=True).start()

    def wait_for(self, key: str, timeout: float = 30) -> dict[str, str]:
        """The next collected message carrying ``key`` (earlier ones are skipped)."""
        with self._cond:
            while True:
                for index in range(self._seen, len(self.received)):
                    if key in self.received[index]:
                        self._seen = index + 1
                        return self.received[index]
                if not self._cond.wait(timeout):
                    raise AssertionError(f"no {key}= from the gateway within {timeout}s: {self.received[-5:]}")


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    # A short path: unix socket paths are limited to ~107 bytes.
    sock = NotifySocket(Path(tempfile_dir()) / f"notify-{os.getpid()}-{id(tmp_path)}.sock")
    try:
        yield sock
    finally:
        sock.sock.close()
        sock.path.unlink(missing_ok=True)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.gettempdir()


# ----------------------------------------------------------------------------- the protocol


def test_notifier_sends_ready_status_stopping_and_pings(notify_socket):
    notifier = Notifier(notify_socket.env(watchdog_usec=20_000_000))
    assert notifier.enabled and notifier.watchdog_s == 20.0
    assert notifier.ready("2 channel(s) up")
    assert notify_socket.recv(5) == {"READY": "1", "STATUS": "2 channel(s) up"}
    notifier.status("busy")
    assert notify_socket.recv(5) == {"STATUS": "busy"}
    notifier.ping()
    assert notify_socket.recv(5) == {"WATCHDOG": "1"}
    notifier.stopping("draining")
    assert notify_socket.recv(5) == {"STOPPING": "1", "STATUS": "draining"}
    notifier.close()


def test_notifier_is_silent_outside_systemd_and_ignores_a_watchdog_for_another_pid():
    notifier = Notifier({})
    assert not notifier.enabled and notifier.ready("x") is False
    other = Notifier({"NOTIFY_SOCKET": "/nonexistent.sock", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert other.watchdog_s is None
    # A socket nobody listens on: a warning, not an exception.
    assert other.status("x") is False


def test_abstract_socket_names_are_supported():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"lucid-test-{threading.get_ident()}"
    listener.bind("\0" + name)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).status("abstract")
        listener.settimeout(5)
        assert listener.recv(100) == b"STATUS=abstract"
    finally:
        listener.close()


async def test_a_blocked_event_loop_stops_the_watchdog_pings(notify_socket):
    notifier = Notifier(notify_socket.env(watchdog_usec=100_000))  # ping every 50 ms
    pinger = asyncio.create_task(notifier.watchdog())
    loop = asyncio.get_running_loop()
    try:
        got = await asyncio.to_thread(notify_socket.recv, 30)
        assert got == {"WATCHDOG": "1"}
        blocking, release = threading.Event(), threading.Event()

        def stall() -> None:  # what a stuck synchronous call does to the loop
            blocking.set()
            release.wait(60)

        # A thread watches the socket while the loop is stuck: what was sent before the
        # stall is drained, then nothing may arrive for 20 ping intervals.
        result: list[dict[str, str] | None] = []

        def watch() -> None:
            try:
                assert blocking.wait(30)
                notify_socket.drain()
                result.append(notify_socket.recv(1.0))
            finally:
                release.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        loop.call_soon(stall)
        await asyncio.to_thread(watcher.join, 60)  # returns once the loop runs again
        assert len(result) == 1 and result[0] is None, "pings arrived while the event loop was blocked"
        # Unblocked, the pings resume.
        assert await asyncio.to_thread(notify_socket.recv, 30) == {"WATCHDOG": "1"}
    finally:
        pinger.cancel()
        notifier.close()


async def test_the_gateway_reports_ready_with_its_channels_and_stopping(notify_socket, make_config, fake_llm):
    config = make_config(gateway={"port": 0})
    notify_socket.collect()
    server = GatewayServer(config, access_log=False,
                           notifier=Notifier(notify_socket.env(watchdog_usec=200_000)))
    await server.__aenter__()
    try:
        ready = await asyncio.to_thread(notify_socket.wait_for, "READY")
        assert "webhook" in ready["STATUS"] and "channel(s) up" in ready["STATUS"]
        assert await asyncio.to_thread(notify_socket.wait_for, "WATCHDOG")
    finally:
        code = await server.shutdown()
    assert code == 0
    stopping = await asyncio.to_thread(notify_socket.wait_for, "STOPPING")
    assert stopping["STATUS"].startswith("draining")


@pytest.mark.slow
async def test_sighup_drains_like_sigterm_and_systemd_hears_all_of_it(tmp_path, notify_socket, fake_llm):
    home = tmp_path / "home"
    home.mkdir()
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(tmp_path / "ws"), "model": "openai/fake-model"}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": fake_llm.base_url}},
        "gateway": {"port": 0, "shutdownGraceS": 5},
    }))
    notify_socket.collect()
    proc = await GatewayProcess(config_path, _env(home, **notify_socket.env(watchdog_usec=400_000))).start()
    try:
        await proc.url()
        ready = await asyncio.to_thread(notify_socket.wait_for, "READY")
        assert "channel(s) up" in ready["STATUS"]
        await asyncio.to_thread(notify_socket.wait_for, "WATCHDOG")
        # `lucid status` sees the running gateway (and a configured provider: exit 0).
        status = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "status", "--config", str(config_path),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(home))
        out, err = await asyncio.wait_for(status.communicate(), 120)
        assert status.returncode == 0, err
        assert re.search(r"gateway:\s+running at http://127\.0\.0\.1:\d+", out.decode()), out.decode()
    finally:
        code = await proc.stop(signal.SIGHUP)
    assert code == 0, proc.output  # not 129: a hangup drains and exits cleanly
    assert "SIGHUP: shutting down gracefully" in proc.output
    assert (await asyncio.to_thread(notify_socket.wait_for, "STOPPING"))["STATUS"].startswith("draining")


# ----------------------------------------------------------------------------- the unit

REQUIRED = ("Type=notify", "WatchdogSec=", "RestartPreventExitStatus=2", "UMask=0077", "ProtectSystem=strict",
            "ProtectHome=", "PrivateDevices=yes", "ProtectKernelTunables=yes", "ProtectControlGroups=yes",
            "ProtectClock=yes", "ProtectHostname=yes", "RestrictAddressFamilies=", "RestrictSUIDSGID=yes",
            "LockPersonality=yes", "CapabilityBoundingSet=\n", "SystemCallArchitectures=native",
            "SystemCallFilter=@system-service", "NoNewPrivileges=yes")


def test_the_shipped_unit_is_the_rendered_one_and_has_every_setting():
    shipped = (REPO / "deploy" / "lucidgate.service").read_text()
    assert shipped == shipped_unit(), "deploy/lucidgate.service is out of date: regenerate it from shipped_unit()"
    for setting in REQUIRED + ("StateDirectory=lucidgate", "DynamicUser=yes"):
        assert setting in shipped, setting
    # The secrets file is required, not optional ("-"): a missing one must fail the start.
    assert "EnvironmentFile=/etc/lucidgate/lucidgate.env" in shipped and "EnvironmentFile=-" not in shipped


def _exposure(unit: Path) -> float:
    out = subprocess.run([need_tool("systemd-analyze"), "security", "--offline=yes", str(unit)],
                         capture_output=True, text=True, check=False)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout + out.stderr)
    assert match, out.stdout + out.stderr
    return float(match.group(1))


@pytest.mark.parametrize("sandbox", [True, False])
@pytest.mark.parametrize("where", ["shipped", "home"])
def test_systemd_rates_the_units_ok(tmp_path, sandbox, where):
    if where == "shipped":
        spec = UnitSpec(exec_start="/opt/lucidgate/.venv/bin/lucid", sandbox=sandbox)
    else:  # what `lucid service install` writes for a venv and data in a home directory
        spec = UnitSpec(exec_start="/home/ann/lucidgate/.venv/bin/lucid", user="ann",
                        config_path="/home/ann/.lucidgate/config.json", workspace=None,
                        environment_file=None, sandbox=sandbox,
                        writable=["/home/ann/.lucidgate"], readable=["/home/ann/lucidgate"])
    unit = tmp_path / "lucidgate.service"
    unit.write_text(render_unit(spec))
    assert _exposure(unit) <= 2.5
    text = unit.read_text()
    for setting in REQUIRED:
        assert setting in text, setting
    if sandbox:  # bubblewrap needs these; without the sandbox nothing may create a namespace
        assert "RestrictNamespaces=user mnt pid" in text and "@mount" in text
    else:
        assert "RestrictNamespaces=yes" in text and "@mount" not in text


def test_the_shipped_file_itself_rates_ok():
    assert _exposure(REPO / "deploy" / "lucidgate.service") <= 2.5


@pytest.mark.slow
async def test_a_config_error_exits_2_so_systemd_does_not_restart_it(tmp_path):
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({"gateway": {"prot": 1}}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from lucidgate.gateway.cli import main; main()", "gateway", "--config", str(config_path),
        "--log-format", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(tmp_path))
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2  # RestartPreventExitStatus=2 in the unit
    entries = [json.loads(line) for line in (out + err).decode().splitlines() if line.strip()]
    assert any("did you mean 'port'" in e["message"] and e["level"] == "error" for e in entries)

"""The systemd unit: one renderer for the shipped file and for ``lucid service install``.

The hardening is chosen to rate "OK" (exposure ≤ 2.5) in ``systemd-analyze security``
while everything the gateway does still works: it needs the network (model, Telegram,
Slack), its own data directory, and child processes for the exec tool. Nothing else.

The exec tool's bubblewrap sandbox (``bwrap --unshare-all``) needs user, mount, pid, net,
ipc, uts and cgroup namespaces and the mount system calls. A unit that forbids namespaces
makes ``bwrap`` fail, so there are two variants:

- ``sandbox=True`` (bwrap is installed and ``tools.exec.sandbox`` is not ``off``):
  ``RestrictNamespaces=`` allows exactly what bwrap creates and ``SystemCallFilter=``
  adds ``@mount``; exposure ≈ 2.1.
- ``sandbox=False``: no namespaces, no ``@mount``, ``@privileged`` denied; exposure ≈ 1.1.

One limit for the sandbox under this unit: ProtectKernelTunables=, ProtectKernelLogs=
and ProtectProc=/ProcSubset= put mounts over parts of /proc, which leaves it "not fully
visible", and the kernel then refuses a fresh procfs mount in a nested user namespace:
``bwrap --proc /proc`` fails ("Can't mount proc ... Operation not permitted") while
``bwrap --ro-bind /proc /proc`` works (tried with a read-only bind over /proc/sys, as
ProtectKernelTunables= makes). Dropping those four settings instead would rate 2.6.

Either way the deny-list in the exec tool still applies; systemd's own confinement
(read-only system, no home, no devices, no capabilities) holds for every command run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
USER_UNIT_DIR = Path("~/.config/systemd/user")
UNIT_NAME = "lucidgate.service"
# systemd restarts a hung gateway after this long without a WATCHDOG=1 ping.
WATCHDOG_SEC = 60
# The exit code of a configuration error: restarting cannot fix it.
CONFIG_ERROR_EXIT = 2
SANDBOX_NAMESPACES = "user mnt pid net ipc uts cgroup"  # what bwrap --unshare-all creates
_HOMES = (Path("/home"), Path("/root"), Path("/run/user"))


@dataclass
class UnitSpec:
    """What differs between installations; the hardening does not."""

    exec_start: str
    user_mode: bool = False
    # System units: None = DynamicUser with StateDirectory=/ConfigurationDirectory=.
    user: str | None = None
    config_path: str = "%S/lucidgate/config.json"
    workspace: str | None = "%S/lucidgate/workspace"
    environment_file: str | None = "/etc/lucidgate/lucidgate.env"
    sandbox: bool = True
    # Paths the service must write (config dir, workspace) and read (the venv).
    writable: list[str] = field(default_factory=list)
    readable: list[str] = field(default_factory=list)
    description: str = "lucidgate personal assistant gateway"


def render_unit(spec: UnitSpec) -> str:
    lines = [
        "[Unit]",
        f"Description={spec.description}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        # READY=1 comes once channels and the scheduler run; WATCHDOG=1 from the event loop.
        "Type=notify",
        "NotifyAccess=main",
        f"WatchdogSec={WATCHDOG_SEC}",
        "TimeoutStartSec=120",
        # The gateway drains running turns within gateway.shutdownGraceS (30 s) on SIGTERM.
        "TimeoutStopSec=45",
        "Restart=on-failure",
        "RestartSec=5",
        f"RestartPreventExitStatus={CONFIG_ERROR_EXIT}",
    ]
    lines += _identity(spec)
    if spec.environment_file:
        # Not optional ("-"): a missing secrets file must stop the start, not pass silently.
        lines.append(f"EnvironmentFile={spec.environment_file}")
    lines.append(f"Environment=LUCIDGATE_CONFIG={spec.config_path}")
    if spec.workspace:
        lines.append(f"Environment=LUCIDGATE_AGENTS__DEFAULTS__WORKSPACE={spec.workspace}")
    lines += [
        "Environment=LITELLM_LOCAL_MODEL_COST_MAP=True",
        "Environment=PYTHONUNBUFFERED=1",
        f"ExecStart={spec.exec_start} gateway --log-format json",
        "",
    ]
    lines += _hardening(spec)
    lines += ["", "[Install]", f"WantedBy={'default.target' if spec.user_mode else 'multi-user.target'}", ""]
    return "\n".join(lines)


def _identity(spec: UnitSpec) -> list[str]:
    if spec.user_mode:
        return []
    if spec.user is None:
        return [
            "DynamicUser=yes",
            # /var/lib/lucidgate (config.json + workspace) and /etc/lucidgate (secrets), 0700.
            "StateDirectory=lucidgate",
            "StateDirectoryMode=0700",
            "ConfigurationDirectory=lucidgate",
            "ConfigurationDirectoryMode=0700",
            "Environment=HOME=%S/lucidgate",
        ]
    return [f"User={spec.user}"]


def _hardening(spec: UnitSpec) -> list[str]:
    lines = [
        "UMask=0077",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "PrivateUsers=yes",
        "PrivateMounts=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "ProtectProc=invisible",
        "ProcSubset=pid",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "RemoveIPC=yes",
        "KeyringMode=private",
        "DevicePolicy=closed",
        "SystemCallArchitectures=native",
        "SystemCallErrorNumber=EPERM",
    ]
    if spec.sandbox:
        lines += [
            "# The exec tool's bubblewrap sandbox: the namespaces and mount calls it needs.",
            f"RestrictNamespaces={SANDBOX_NAMESPACES}",
            "SystemCallFilter=@system-service @mount",
            "SystemCallFilter=~@resources",
        ]
    else:
        lines += [
            "RestrictNamespaces=yes",
            "SystemCallFilter=@system-service",
            "SystemCallFilter=~@privileged @resources",
        ]
    writable = _outermost(spec.writable)
    readable = [p for p in _outermost(spec.readable) if p not in writable]
    homes = [p for p in writable + readable if _under_home(p)]
    if homes:
        # Home directories are hidden, except the ones this installation lives in.
        lines.append("ProtectHome=tmpfs")
        lines += [f"BindPaths={p}" for p in writable if _under_home(p)]
        lines += [f"BindReadOnlyPaths={p}" for p in readable if _under_home(p)]
    else:
        lines.append("ProtectHome=yes")
    rw = [p for p in writable if not _under_home(p)]
    if rw:
        lines.append("ReadWritePaths=" + " ".join(rw))
    return lines


def _outermost(paths: list[str]) -> list[str]:
    """Drop paths inside another listed path (one bind covers both)."""
    unique = sorted(set(paths))
    return [p for p in unique if not any(q != p and Path(q) in Path(p).parents for q in unique)]


def _under_home(path: str) -> bool:
    p = Path(path)
    return any(p == h or h in p.parents for h in _HOMES)


def shipped_unit() -> str:
    """deploy/lucidgate.service: venv in /opt/lucidgate, data in /var/lib/lucidgate."""
    header = (
        "# systemd unit for lucidgate (generated by gateway/ops/unit.py; `lucid service install`\n"
        "# writes one for your own installation). Install by hand:\n"
        "#   sudo install -D -m 600 deploy/lucidgate.env.example /etc/lucidgate/lucidgate.env  # edit it\n"
        "#   sudo cp deploy/lucidgate.service /etc/systemd/system/\n"
        "#   sudo systemctl daemon-reload && sudo systemctl enable --now lucidgate\n"
        "# Data (config.json + workspace) lives in /var/lib/lucidgate; `lucid doctor` checks a setup.\n"
    )
    return header + render_unit(UnitSpec(exec_start="/opt/lucidgate/.venv/bin/lucid"))

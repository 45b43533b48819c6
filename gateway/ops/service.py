"""``lucid service install``: a unit for *this* installation (its venv, config, workspace,
user) with the hardening of ``gateway.ops.unit``, checked by ``systemd-analyze verify``."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lucidgate.config import resolve_config_path
from lucidgate.config.fileio import atomic_write_text
from lucidgate.config.schema import Config
from lucidgate.gateway.ops.unit import SYSTEM_UNIT_DIR, UNIT_NAME, USER_UNIT_DIR, UnitSpec, render_unit

__all__ = ["install", "next_steps", "render_unit", "spec_for", "verify"]


def _lucid_executable() -> str:
    beside = Path(sys.executable).parent / "lucid"
    if beside.exists():
        return str(beside)
    found = shutil.which("lucid")
    return found or str(beside)


def sandbox_usable(config: Config) -> bool:
    """Whether the exec tool will use bubblewrap (the unit must then allow namespaces)."""
    return config.tools.exec.sandbox != "off" and shutil.which("bwrap") is not None


def spec_for(config: Config, config_path: Path | None, *, user_mode: bool) -> UnitSpec:
    path = resolve_config_path(config_path).resolve()
    workspace = config.workspace.resolve()
    env_file = path.parent / "lucidgate.env"
    writable = sorted({str(path.parent), str(workspace)})
    # The venv, the interpreter it links to (pyenv keeps it in a home) and the code itself.
    code = Path(__file__).resolve().parents[2]
    readable = sorted({str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, code)} - set(writable))
    user = None if user_mode else (os.environ.get("SUDO_USER") or getpass.getuser())
    return UnitSpec(exec_start=_lucid_executable(), user_mode=user_mode, user=user, config_path=str(path),
                    workspace=str(workspace), environment_file=str(env_file) if env_file.exists() else None,
                    sandbox=sandbox_usable(config), writable=writable, readable=readable)


def root_notice(spec: UnitSpec) -> str:
    """A word before writing ``User=root``: usually a root shell, not a choice ("" otherwise)."""
    if spec.user != "root":
        return ""
    return ("note: the service will run as root (User=root), because this ran as root without sudo. "
            "To run it as your own user, run `sudo lucid service install` from that user's shell, "
            "or `lucid service install --user`.")


def install(text: str, *, user_mode: bool, unit_dir: Path | None = None) -> Path:
    folder = unit_dir or (USER_UNIT_DIR.expanduser() if user_mode else SYSTEM_UNIT_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / UNIT_NAME
    atomic_write_text(path, text)
    os.chmod(path, 0o644)  # systemd reads units as any user; the unit holds no secret
    return path


def verify(path: Path, *, user_mode: bool) -> str:
    """``systemd-analyze verify`` output ("" when fine or when systemd-analyze is missing)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return ""
    cmd = [tool, "verify", *(["--user"] if user_mode else []), str(path)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"systemd-analyze verify did not run: {exc}"
    out = (done.stdout + done.stderr).strip()
    if done.returncode == 0 and not out:
        return "systemd-analyze verify: no problems"
    return f"systemd-analyze verify says:\n{out}" if out else ""


def next_steps(user_mode: bool) -> list[str]:
    if user_mode:
        return ["enable it:", "  systemctl --user daemon-reload && systemctl --user enable --now lucidgate",
                "  loginctl enable-linger $USER   # keep it running while you are logged out"]
    return ["enable it:", "  sudo systemctl daemon-reload && sudo systemctl enable --now lucidgate",
            "then: journalctl -u lucidgate -f -o cat   (and `lucid doctor` if anything looks wrong)"]

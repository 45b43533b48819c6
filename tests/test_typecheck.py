"""STYLE asks for a clean mypy run; this keeps it clean (config in pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("config", "memory", "channels", "scheduler", "gateway")


def namespace_tree() -> Path:
    """A folder holding ``lucidgate/<layer>`` links to the repository's folders.

    The editable install maps the ``lucidgate.*`` namespace with an import hook, which mypy does
    not run; this gives mypy the installed shape. It lives in mypy's own cache folder (ignored by
    git) at a fixed path, so the incremental cache stays valid between runs."""
    base = ROOT / ".mypy_cache" / "namespace"
    tree = base / "lucidgate"
    tree.mkdir(parents=True, exist_ok=True)
    for layer in LAYERS:
        link = tree / layer
        if not link.is_symlink():
            link.symlink_to(ROOT / layer, target_is_directory=True)
    return base


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    env = {**os.environ, "MYPYPATH": str(namespace_tree())}
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

"""System programs a few tests use for real: Debian's ``chromium`` (the console in a browser),
``systemd-analyze`` (rating the service unit offline), ``bwrap`` (the exec sandbox) and
``dovecot`` (the IMAP server the email channel is tested against).

On a machine with only Python those tests skip with one line saying what to install; with
``LUCID_REQUIRE_REAL=1`` (``.ci/run`` sets it, and installs the programs) a missing one fails
the test instead, so CI can never go green by skipping them. Every such test goes through
``need_tool`` — directly, or with ``@pytest.mark.needs("bwrap")`` (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

APT_PACKAGE = {"chromium": "chromium", "systemd-analyze": "systemd", "bwrap": "bubblewrap",
               "dovecot": "dovecot-imapd"}


def require_real() -> bool:
    return os.environ.get("LUCID_REQUIRE_REAL", "") not in ("", "0")


def need_tool(name: str, path: str | None = None) -> str:
    """The program's path; otherwise skip (or fail under ``LUCID_REQUIRE_REAL=1``)."""
    found = path if path and Path(path).exists() else shutil.which(name)
    if found:
        return found
    why = f"needs {name}: apt-get install {APT_PACKAGE.get(name, name)} (.ci/run installs it)"
    if require_real():
        pytest.fail(f"{why}; LUCID_REQUIRE_REAL=1 forbids skipping", pytrace=False)
    pytest.skip(why)

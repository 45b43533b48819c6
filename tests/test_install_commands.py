"""The install commands a newcomer copies run quietly.

Python 3.11's bundled pip (23.2) compares extras without normalising them (PEP 685 came in
pip 23.3): jusText, which trafilatura pulls in, asks for ``lxml[html_clean]`` and lxml 6 calls
the extra ``html-clean``, so that pip warns "lxml … does not provide the extra 'html_clean'" in
the middle of the install. The installed set does not change (the lock pins lxml and
lxml_html_clean, and lucidgate requires lxml_html_clean itself); a current pip, which
``python3 -m venv --upgrade-deps`` puts in the new venv (as .ci/run does), says nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _install_commands(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if "pip install -c requirements.lock" in line and line.startswith("python3 -m venv")]


def test_the_readme_and_development_commands_give_the_venv_a_current_pip() -> None:
    commands = _install_commands(ROOT / "README.md") + _install_commands(ROOT / "docs" / "development.md")
    assert len(commands) == 3, commands  # run it, test it; development repeats the test command
    for command in commands:
        assert re.match(r"python3 -m venv --upgrade-deps \.venv && ", command), command


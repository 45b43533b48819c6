"""The design is in the repository: every "DESIGN §n" a docstring or comment cites is a
section of docs/DESIGN.md, and no module cites a document the repository does not have."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("config", "memory", "channels", "scheduler", "gateway", "tests", "bench")
CITATION = re.compile(r"\bDESIGN ((?:§\d+(?:\.\d+)*(?:[–-]\d+)?(?:, )?)+)")
SECTION = re.compile(r"^#{2,3} (\d+(?:\.\d+)*)\.? ", re.MULTILINE)


def _sections() -> set[str]:
    return set(SECTION.findall((ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")))


def _citations() -> list[tuple[str, str]]:
    """(where, section) for every cited section; ranges like §1–2 cite both ends."""
    found: list[tuple[str, str]] = []
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "test_docs.py":
                continue  # its own examples cite a section on purpose
            text = path.read_text(encoding="utf-8")
            for match in CITATION.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                for ref in re.findall(r"§([\d.–-]+)", match.group(1)):
                    for section in re.split(r"[–-]", ref.rstrip(".")):
                        found.append((f"{path.relative_to(ROOT)}:{line}", section))
    return found


def test_every_cited_design_section_exists() -> None:
    sections = _sections()
    citations = _citations()
    assert len(citations) > 30  # the scan really finds the docstrings' citations
    missing = [f"{where} cites DESIGN §{section}" for where, section in citations if section not in sections]
    assert not missing, "sections missing from docs/DESIGN.md:\n" + "\n".join(missing)


def test_the_checker_catches_a_missing_section() -> None:
    assert "99" not in _sections()
    assert CITATION.search('"""Thing (DESIGN §99, §4.2)."""')
    assert re.findall(r"§([\d.–-]+)", "§8, §11") == ["8", "11"]


def test_no_module_cites_a_document_outside_the_repository() -> None:
    outside = []
    for package in SOURCES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "test_docs.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if "STYLE §" in line:
                    outside.append(f"{path.relative_to(ROOT)}:{number}")
    assert not outside, "STYLE is not in the repository; say the reason in place:\n" + "\n".join(outside)

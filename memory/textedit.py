"""Exact, unique text replacement — the edit both the ``edit_file`` tool and Dream use.

The model quotes ``old_text`` and it must occur exactly once (or ``replace_all``). A miss
is the common failure, so its message does the model's homework: a unified diff from its
``old_text`` to the most similar region of the file, and a note when only whitespace
differs. Models write ``\\n``; a CRLF file adopts its own endings for the match.
"""

from __future__ import annotations

import difflib

__all__ = ["EditError", "closest_region", "miss_message", "replace_exact"]


class EditError(ValueError):
    """The edit cannot be applied; the message tells the model what to do instead."""


def replace_exact(text: str, old: str, new: str, *, shown: str, replace_all: bool = False,
                  offer_replace_all: bool = True) -> tuple[str, int]:
    """(updated text, occurrences replaced); raises ``EditError`` on a miss, an ambiguous
    match or a no-op. ``shown`` names the file in messages; ``offer_replace_all`` says
    whether the caller's tool has a ``replace_all`` switch to suggest."""
    if old == "":
        raise EditError("old_text is empty; quote the exact snippet to replace")
    if old == new:
        raise EditError("old_text and new_text are identical; nothing would change (a no-op edit)")
    old, new = _match_line_endings(text, old, new)
    count = text.count(old)
    if count == 0:
        raise EditError(miss_message(text, old, shown))
    if count > 1 and not replace_all:
        lines = _occurrence_lines(text, old)
        where = ", ".join(str(n) for n in lines[:10]) + (", …" if len(lines) > 10 else "")
        raise EditError(
            f"old_text occurs {count} times in {shown} (lines {where}); include more "
            "surrounding text to make it unique" + (", or set replace_all=true" if offer_replace_all else "")
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    return updated, count if replace_all else 1


def _match_line_endings(text: str, old: str, new: str) -> tuple[str, str]:
    if "\r\n" in text and "\r" not in old and old not in text:
        return old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")
    return old, new


def _occurrence_lines(text: str, needle: str) -> list[int]:
    lines, start = [], 0
    while (index := text.find(needle, start)) != -1:
        lines.append(text.count("\n", 0, index) + 1)
        start = index + len(needle)
    return lines


def miss_message(text: str, old: str, shown: str) -> str:
    """Explain a failed match with a diff against the most similar region of the file."""
    head = f"old_text was not found in {shown}; it must match exactly (whitespace included)."
    file_lines = text.splitlines()
    old_lines = old.splitlines() or [old]
    if not file_lines:
        return f"{head} The file is empty; use write_file to give it content."
    start, ratio = closest_region(file_lines, old_lines)
    if ratio < 0.3:
        return f"{head} Nothing in it resembles old_text; read the file and copy the exact text."
    end = min(len(file_lines), start + len(old_lines))
    region = file_lines[start:end]
    diff = difflib.unified_diff(
        old_lines, region, fromfile="old_text", tofile=f"{shown} lines {start + 1}-{end}", lineterm="", n=2
    )
    diff_text = "\n".join(diff)
    if len(diff_text) > 3000:
        diff_text = diff_text[:3000] + "\n…[diff cut]"
    hint = ""
    if " ".join(old.split()) == " ".join("\n".join(region).split()):
        hint = " They differ only in whitespace or indentation."
    return (
        f"{head} Closest region is lines {start + 1}-{end} ({int(ratio * 100)}% similar).{hint} "
        f"Diff from your old_text to the file:\n{diff_text}\n"
        "Retry with old_text copied exactly from the file."
    )


def closest_region(file_lines: list[str], old_lines: list[str]) -> tuple[int, float]:
    """Start index and similarity of the window of ``len(old_lines)`` lines most like old_text.

    A cheap upper bound (``quick_ratio``) ranks every window; only the best few get the
    exact (quadratic) ratio, so a miss in a long file stays fast.
    """
    width = min(len(old_lines), len(file_lines))
    target = "\n".join(old_lines)
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(target)
    bounds: list[tuple[float, int]] = []
    for start in range(len(file_lines) - width + 1):
        matcher.set_seq1("\n".join(file_lines[start : start + width]))
        bounds.append((matcher.quick_ratio(), start))
    bounds.sort(reverse=True)
    best_start, best_ratio = 0, -1.0
    for bound, start in bounds[:25]:
        if bound <= best_ratio:
            break
        matcher.set_seq1("\n".join(file_lines[start : start + width]))
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best_start, best_ratio = start, ratio
    return best_start, max(best_ratio, 0.0)

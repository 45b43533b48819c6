"""Quoted replies and signatures cut from a mail before the model reads it.

Mail clients put the whole earlier conversation under (or above) a reply; the model already
has that conversation in its session, so reading it again costs tokens and confuses who said
what. What is cut, from the first line that starts it to the end:

* an attribution line ("On Tue, 3 Jun 2025, Alice wrote:", possibly wrapped over two lines)
  followed by quoted text, and Outlook's "-----Original Message-----" or its
  "From: … / Sent: …" header block under a rule;
* the signature after the standard delimiter ``-- `` (RFC 3676), and a lone trailing
  "Sent from my …" line;
* trailing ``>`` quoted lines (inline quotes in the middle stay: they give the answer's context).

When cutting would leave nothing (a mail that is only a forward), the text is kept whole.
"""

from __future__ import annotations

import re

__all__ = ["strip_reply"]

_WROTE = re.compile(r"^(on\b.{0,200}|am\b.{0,200}|le\b.{0,200}|el\b.{0,200})"
                    r"(wrote|schrieb|a écrit|escribió)\b.{0,80}:\s*$", re.IGNORECASE)
_ORIGINAL = re.compile(r"^-{2,}\s*(original message|forwarded message|ursprüngliche nachricht)\s*-{2,}\s*$",
                       re.IGNORECASE)
_RULE = re.compile(r"^_{10,}\s*$")
_HEADER = re.compile(r"^\*?(from|von|de)\s*:\*?\s", re.IGNORECASE)
_SIG = re.compile(r"^\\?--\s*$")  # "-- " (RFC 3676), "--", and html2text's escaped "\--"
_SENT_FROM = re.compile(r"^(sent from my|get outlook for|envoyé de mon)\b", re.IGNORECASE)


def _cut_at(lines: list[str]) -> int:
    """The index of the first line of the quoted part or signature (len(lines): none)."""
    for i, line in enumerate(lines):
        text = line.strip()
        if _SIG.match(line) and i > 0:
            return i
        if _ORIGINAL.match(text):
            return i
        if _WROTE.match(text):
            return i
        if i + 1 < len(lines) and _WROTE.match(f"{text} {lines[i + 1].strip()}") and \
                text.lower().startswith(("on ", "am ", "le ", "el ")):
            return i
        if _RULE.match(text) and i + 1 < len(lines) and _HEADER.match(lines[i + 1].strip()):
            return i
        if _HEADER.match(text) and i + 1 < len(lines) and \
                re.match(r"^\*?(sent|date|gesendet|envoyé)\s*:", lines[i + 1].strip(), re.IGNORECASE):
            return i
    return len(lines)


def strip_reply(text: str) -> str:
    """``text`` without the quoted conversation and the signature (see the module docstring)."""
    lines = text.replace("\r\n", "\n").split("\n")
    kept = lines[:_cut_at(lines)]
    while kept and (not kept[-1].strip() or kept[-1].lstrip().startswith(">")):
        kept.pop()
    if kept and _SENT_FROM.match(kept[-1].strip()):
        kept.pop()
    while kept and not kept[-1].strip():
        kept.pop()
    result = "\n".join(kept).strip("\n")
    return result if result.strip() else text.strip()

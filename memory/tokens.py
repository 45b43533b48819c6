"""Token counting with tiktoken, offline.

tiktoken downloads encodings unless it finds them in the folder ``TIKTOKEN_CACHE_DIR`` names.
litellm ships ``cl100k_base`` in its package (``bundled_tokenizer_dir``); the process entry
point (``gateway._offline``) points the variable there once, at start, before any thread
runs — this module only reads the environment, so loading never touches the network and
nothing edits ``os.environ`` under running threads. ``cl100k_base`` is an estimate for
non-OpenAI models, which is what a budget needs. ``encoding`` takes a moment and ~40 MB the
first time: the daemon calls it in a thread before it reports ready; a short-lived process
(``lucid agent``) loads it only when a count is needed, through ``ready`` (off the loop), and
``fits`` tells first whether a byte count already settles the question.
"""

from __future__ import annotations

import json
import os
import threading
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

_lock = threading.Lock()
# Per-message framing overhead in OpenAI's chat format (role, separators).
MESSAGE_OVERHEAD = 4
# tiktoken names a cached file after the SHA-1 of its public URL; litellm's copy is named so.
_CL100K_CACHE_NAME = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"


class TokenizerUnavailable(RuntimeError):
    """The bundled encoding cannot be found: counting would have to download it."""


def bundled_tokenizer_dir() -> str | None:
    """litellm's folder of tiktoken files, or None when litellm is not installed."""
    spec = find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "litellm_core_utils" / "tokenizers"
    return str(folder) if folder.is_dir() else None


@lru_cache(maxsize=1)
def encoding() -> Any:
    """The cl100k_base encoding from the folder ``TIKTOKEN_CACHE_DIR`` names (no network)."""
    with _lock:
        folder = os.environ.get("TIKTOKEN_CACHE_DIR")
        if not folder or not (Path(folder) / _CL100K_CACHE_NAME).is_file():
            raise TokenizerUnavailable(
                "cl100k_base is not in TIKTOKEN_CACHE_DIR; start through the `lucid` entry point "
                "(it points the variable at litellm's bundled copy) or set it yourself")
        import tiktoken

        return tiktoken.get_encoding("cl100k_base")


def loaded() -> bool:
    """Whether ``encoding`` has been loaded in this process (counting is then cheap)."""
    return encoding.cache_info().currsize > 0


async def ready() -> None:
    """Load the encoding in a worker thread unless it is loaded: call before counting on the
    event loop in a process that did not load it at start."""
    if not loaded():
        import asyncio  # here: the CLI imports this module at start only for bundled_tokenizer_dir

        await asyncio.to_thread(encoding)


def fits(texts: list[str], budget: int) -> bool:
    """True when ``texts`` certainly fit ``budget`` tokens: a BPE token covers at least one
    byte, so their UTF-8 size bounds their count and the tokenizer need not run."""
    total = 0
    for text in texts:
        total += len(text.encode("utf-8"))
        if total > budget:
            return False
    return True


def count_text(text: str) -> int:
    if not text:
        return 0
    return len(encoding().encode(text, disallowed_special=()))


def count_message(message: dict[str, Any]) -> int:
    total = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        total += count_text(content)
    elif isinstance(content, list):
        total += sum(count_text(p.get("text", "")) for p in content if isinstance(p, dict))
    if message.get("tool_calls"):
        total += count_text(json.dumps(message["tool_calls"], ensure_ascii=False))
    if message.get("name"):
        total += count_text(str(message["name"]))
    return total


def cached_message_bytes(message: dict[str, Any]) -> int:
    """A cheap upper bound on ``count_message`` (a BPE token covers at least one byte),
    cached on the dict (``_bytes``): below a budget, the tokenizer need not run at all."""
    cached = message.get("_bytes")
    if cached is None:
        content = message.get("content")
        size = len(content.encode("utf-8")) if isinstance(content, str) else len(json.dumps(content))
        if message.get("tool_calls"):
            size += len(json.dumps(message["tool_calls"], ensure_ascii=False).encode("utf-8"))
        cached = message["_bytes"] = size + MESSAGE_OVERHEAD + len(str(message.get("name") or ""))
    return int(cached)


def cached_message_tokens(message: dict[str, Any]) -> int:
    """``count_message``, once per message: the count rides on the in-memory dict (``_tok``,
    never written to disk), so summing a conversation costs a lookup per message."""
    cached = message.get("_tok")
    if cached is None:
        cached = message["_tok"] = count_message(message)
    return int(cached)


def count_messages(messages: list[dict[str, Any]]) -> int:
    return sum(count_message(m) for m in messages) + 3


def count_tools(tools: list[dict[str, Any]] | None) -> int:
    if not tools:
        return 0
    return count_text(json.dumps(tools, ensure_ascii=False, separators=(",", ":")))

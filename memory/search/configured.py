"""The recall index and ranking settings that ``agents.defaults.memory.search`` describes.

Apart from ``service`` (the gateway's background syncing, which needs asyncio and threads)
so a terminal command that searches or counts once (``lucid memory search``, ``lucid
status``) opens the same index with the same settings without loading the service.
"""

from __future__ import annotations

from lucidgate.config.schema import Config
from lucidgate.memory.search.embed import Embedder, make_embedder
from lucidgate.memory.search.hits import SearchSettings
from lucidgate.memory.search.index import MemoryIndex

__all__ = ["Embedders", "open_index"]


class Embedders:
    """Embedders by their settings, built once: the agents of one daemon with the same
    embedding settings share one (one model loaded, one engine handle), whatever their
    number. The composition root keeps one for the daemon's life."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str | None, str | None], tuple[Embedder | None, str]] = {}

    def get(self, model: str, *, api_key: str | None, api_base: str | None) -> tuple[Embedder | None, str]:
        key = (model, api_key, api_base)
        if key not in self._made:
            self._made[key] = make_embedder(model, api_key=api_key, api_base=api_base)
        return self._made[key]


def open_index(config: Config, embedders: Embedders | None = None) -> tuple[MemoryIndex, SearchSettings] | None:
    """The workspace's index (with the configured embedder, from ``embedders`` when given)
    and ranking; None when disabled."""
    conf = config.agent.memory.search
    if not conf.enabled:
        return None
    model = conf.embedding.model
    _, provider = config.provider_for(model)
    embedder, why = (embedders if embedders is not None else Embedders()).get(
        model, api_key=provider.api_key.get_secret_value() if provider else None,
        api_base=provider.api_base if provider else None)
    index = MemoryIndex(config.workspace, embedder=embedder, sources=conf.sources,
                        chunk_tokens=conf.chunk_tokens, chunk_overlap=conf.chunk_overlap,
                        batch_size=conf.embedding.batch_size, keyword_only_reason=why)
    settings = SearchSettings(vector_weight=conf.vector_weight, text_weight=conf.text_weight,
                              half_life_days=conf.half_life_days, mmr_lambda=conf.mmr_lambda,
                              decay_floor=conf.decay_floor)
    return index, settings

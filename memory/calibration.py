"""Token estimates that calibrate themselves against what the provider counts.

Every budget in lucidgate is counted locally with ``cl100k_base`` (``memory.tokens``),
which is only an estimate for other models: SmolLM2's tokenizer counts ~12 % more, and
a server's chat template adds its own text around messages and tools. The provider
reports the truth after each call (``usage.prompt_tokens``), so we keep, per model, the
ratio of that number to our estimate of the same request and scale estimates by it.

The ratio is a running mean over the first samples, then an exponential moving average
(recent behaviour wins, one odd answer does not swing it), and every observation is
clamped to ``[MIN_RATIO, MAX_RATIO]``: a server that reports nonsense (0, or the size of
a cached prefix only) cannot make the budget absurd. Tiny requests are not sampled
because a template's fixed overhead dominates them. The state lives in
``<workspace>/state/token_calibration.json``, written atomically from a worker thread, so
a restart starts calibrated.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write_text
from lucidgate.memory.tokens import count_messages, count_tools

logger = logging.getLogger(__name__)

__all__ = ["MAX_RATIO", "MIN_RATIO", "TokenCalibration"]

MIN_RATIO = 0.5
MAX_RATIO = 3.0
MIN_SAMPLE_TOKENS = 200  # below this the template's fixed overhead dominates the ratio
WARMUP_SAMPLES = 5  # a plain mean until then, an EMA with weight 1/WARMUP_SAMPLES after
SAVE_STEP = 0.005  # persist when the ratio moved at least this much since the last write
FILE_VERSION = 1


def clamp(ratio: float) -> float:
    if not math.isfinite(ratio):
        return MAX_RATIO if ratio > 0 else MIN_RATIO
    return min(max(ratio, MIN_RATIO), MAX_RATIO)


@dataclass(slots=True)
class _Model:
    ratio: float = 1.0
    samples: int = 0


class TokenCalibration:
    """Per-model ratio ``provider prompt_tokens / local estimate``; see the module doc."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._models: dict[str, _Model] = {}
        self._saved: dict[str, float] = {}
        self._loaded = path is None
        self._load_lock = asyncio.Lock()
        self._save_lock = asyncio.Lock()
        self._busy: set[str] = set()  # models with an observation being counted
        self._tasks: set[asyncio.Task[None]] = set()

    # -- reading -------------------------------------------------------------------------
    def factor(self, model: str) -> float:
        """The current ratio for ``model`` (1.0 until it has been observed or loaded)."""
        entry = self._models.get(model)
        return entry.ratio if entry is not None else 1.0

    def samples(self, model: str) -> int:
        entry = self._models.get(model)
        return entry.samples if entry is not None else 0

    def scale(self, model: str, estimate: int) -> int:
        """``estimate`` (cl100k tokens) in the provider's tokens, rounded up."""
        return math.ceil(estimate * self.factor(model))

    async def ensure_loaded(self) -> None:
        """Read the persisted ratios once (in a worker thread); later calls return at once."""
        if self._loaded:
            return
        async with self._load_lock:
            if not self._loaded:
                loaded = await asyncio.to_thread(self._read)
                for model, entry in loaded.items():
                    self._models.setdefault(model, entry)
                    self._saved.setdefault(model, entry.ratio)
                self._loaded = True

    def _read(self) -> dict[str, _Model]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("%s is unreadable (%s); token estimates start uncalibrated", self.path, exc)
            return {}
        models = data.get("models") if isinstance(data, dict) else None
        out: dict[str, _Model] = {}
        for model, entry in (models or {}).items():
            if not isinstance(entry, dict):
                continue
            ratio, samples = entry.get("ratio"), entry.get("samples", 1)
            if isinstance(ratio, (int, float)) and isinstance(samples, int) and samples > 0:
                out[str(model)] = _Model(clamp(float(ratio)), samples)
        return out

    # -- learning ------------------------------------------------------------------------
    def observe(self, model: str, estimated: int, reported: int) -> float | None:
        """Fold one call into the ratio; returns the new ratio, or None if not sampled."""
        if reported <= 0 or estimated < MIN_SAMPLE_TOKENS:
            return None
        observed = clamp(reported / estimated)
        entry = self._models.setdefault(model, _Model())
        entry.samples += 1
        weight = 1.0 / min(entry.samples, WARMUP_SAMPLES)
        entry.ratio = clamp(entry.ratio + weight * (observed - entry.ratio))
        return entry.ratio

    def observe_request(self, model: str, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]] | None, reported: int) -> None:
        """After a call: count the request in a worker thread, then learn from it.

        Runs in the background so the caller does not wait for the tokenizer; while one
        request of a model is being counted, further ones are skipped (a sample, not a
        census). Needs a running event loop.
        """
        if reported <= 0 or model in self._busy:
            return
        self._busy.add(model)
        task = asyncio.get_running_loop().create_task(
            self._observe(model, messages, tools, reported), name=f"calibrate:{model}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _observe(self, model: str, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None, reported: int) -> None:
        try:
            await self.ensure_loaded()
            estimated = await asyncio.to_thread(_request_tokens, messages, tools)
            ratio = self.observe(model, estimated, reported)
            if ratio is not None:
                logger.debug("token calibration %s: provider %d / estimate %d -> ratio %.3f",
                             model, reported, estimated, ratio)
                await self.save_if_moved(model)
        except Exception:  # noqa: BLE001 - calibration must never break a call
            logger.warning("token calibration for %s failed", model, exc_info=True)
        finally:
            self._busy.discard(model)

    async def settled(self) -> None:
        """Wait for the observations in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- persisting ----------------------------------------------------------------------
    async def save_if_moved(self, model: str) -> None:
        entry = self._models.get(model)
        if self.path is None or entry is None:
            return
        last = self._saved.get(model)
        if last is not None and abs(entry.ratio - last) < SAVE_STEP:
            return
        async with self._save_lock:
            snapshot = {m: {"ratio": round(e.ratio, 4), "samples": e.samples}
                        for m, e in sorted(self._models.items())}
            await asyncio.to_thread(self._write, snapshot)
            self._saved.update({m: e.ratio for m, e in self._models.items()})

    def _write(self, models: dict[str, dict[str, Any]]) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"version": FILE_VERSION, "models": models}, indent=1, sort_keys=True)
        atomic_write_text(self.path, text + "\n")


def _request_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    return count_messages(messages) + count_tools(tools)

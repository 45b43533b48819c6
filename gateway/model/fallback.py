"""Model choice per call: the session's preset, then ``agents.defaults.fallbackModels`` in order.

A litellm ``Router`` holds one deployment per configured model (the primary, every fallback
and every ``modelPresets`` entry), each with its own provider key, base URL and headers
(taken from ``providers.<prefix>``), its retries and cooldowns off — our retry loop in
``gateway/model/client.py`` owns timing. The chain itself is walked here rather than by the Router's
own ``fallbacks``, because litellm falls back on *any* error, including a rejected API key
or a malformed request, which would only hide a configuration mistake behind a second bill.

Policy: a timeout, a connection error, a 5xx or a 429 moves on to the next model (logged,
counted in ``lucid_llm_fallbacks_total``); anything else — authentication, bad request,
context overflow — is raised at once. When every model failed transiently the last error is
raised and ``LiteLLMChatModel`` backs off and retries the whole chain.

``/model`` (owner only) pins a session to a preset; the choice lives in
``state/models.json`` so it survives restarts.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from lucidgate.config.fileio import atomic_write_text
from lucidgate.config.schema import Config
from lucidgate.gateway._offline import import_litellm
from lucidgate.gateway.model.errors import is_transient
from lucidgate.gateway.metrics import Metrics

logger = logging.getLogger(__name__)


def is_fallback_error(exc: BaseException) -> bool:
    """Timeouts, connection errors, 5xx and 429 fail over; auth and bad requests never do."""
    ll = import_litellm()  # loaded already: a model call has just failed
    never = (ll.AuthenticationError, ll.PermissionDeniedError, ll.BadRequestError,
             ll.NotFoundError, ll.UnprocessableEntityError)  # overflow and policy are bad requests
    if isinstance(exc, never):
        return False
    return is_transient(exc)


class SessionModels:
    """Which preset each session is pinned to (``/model``), persisted atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._by_session: dict[str, str] = {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                self._by_session = {str(k): str(v) for k, v in data.items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            logger.warning("%s is unreadable; sessions use the default model", path)

    def get(self, session_key: str | None) -> str | None:
        return self._by_session.get(session_key) if session_key else None

    def set(self, session_key: str, preset: str | None) -> None:
        """Pin (or with None, unpin) a session; blocking — call it from a thread."""
        with self._lock:
            if preset is None:
                self._by_session.pop(session_key, None)
            else:
                self._by_session[session_key] = preset
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self._by_session, indent=1, sort_keys=True))


class ModelChain:
    """The models a call may use, in order, and the Router that knows how to reach each."""

    def __init__(self, config: Config, *, metrics: Metrics | None = None,
                 sessions: SessionModels | None = None) -> None:
        self._config = config
        self.sessions = sessions
        self._router: Any = None
        self._metrics = metrics
        self.switches = 0

    @property
    def presets(self) -> dict[str, str]:
        return dict(self._config.agent.model_presets)

    def models_for(self, session_key: str | None) -> list[str]:
        """The session's preset (or the default model), then the fallbacks, without repeats."""
        agent = self._config.agent
        preset = self.sessions.get(session_key) if self.sessions is not None else None
        first = agent.model_presets.get(preset, agent.model) if preset else agent.model
        chain: list[str] = []
        for model in [first, *agent.fallback_models]:
            if model not in chain:
                chain.append(model)
        return chain

    def needed(self) -> bool:
        agent = self._config.agent
        return bool(agent.fallback_models or agent.model_presets)

    def _deployment(self, model: str) -> dict[str, Any]:
        params: dict[str, Any] = {"model": model, "timeout": self._config.agent.llm_timeout_s,
                                  "max_retries": 0}
        _, provider = self._config.provider_for(model)
        if provider is not None:
            key = provider.api_key.get_secret_value()
            if key or provider.api_base:
                params["api_key"] = key or "sk-no-key"
            if provider.api_base:
                params["api_base"] = provider.api_base
            if provider.extra_headers:
                params["extra_headers"] = dict(provider.extra_headers)
        return {"model_name": model, "litellm_params": params}

    def router(self, litellm: Any) -> Any:
        if self._router is None:
            agent = self._config.agent
            models = [agent.model, *agent.fallback_models, *agent.model_presets.values()]
            unique = list(dict.fromkeys(models))
            self._router = litellm.Router(model_list=[self._deployment(m) for m in unique],
                                          num_retries=0, disable_cooldowns=True,
                                          timeout=agent.llm_timeout_s)
        return self._router

    def client(self, litellm: Any, session_key: str | None) -> _ChainClient:
        """What ``LiteLLMChatModel`` calls instead of the ``litellm`` module for one call."""
        return _ChainClient(self, litellm, self.models_for(session_key))

    def _switched(self, failed: str, to: str, exc: BaseException) -> None:
        self.switches += 1
        if self._metrics is not None:
            self._metrics.llm_fallback(failed, to)
        logger.warning("model %s failed (%s); falling back to %s", failed, type(exc).__name__, to)


class _ChainClient:
    """Quacks like the two litellm functions ``LiteLLMChatModel`` uses."""

    def __init__(self, chain: ModelChain, litellm: Any, models: list[str]) -> None:
        self._chain = chain
        self._litellm = litellm
        self.models = models
        self.answered_by: str | None = None

    def stream_chunk_builder(self, chunks: list[Any], messages: Any = None) -> Any:
        return self._litellm.stream_chunk_builder(chunks, messages=messages)

    async def acompletion(self, **kwargs: Any) -> Any:
        router = self._chain.router(self._litellm)
        # The Router's deployment carries the provider settings of each model.
        for key in ("model", "api_key", "api_base", "extra_headers", "timeout", "num_retries", "max_retries"):
            kwargs.pop(key, None)
        last: BaseException | None = None
        for index, model in enumerate(self.models):
            try:
                response = await router.acompletion(model=model, num_retries=0, **kwargs)
            except Exception as exc:
                if not is_fallback_error(exc) or index == len(self.models) - 1:
                    raise
                self._chain._switched(model, self.models[index + 1], exc)
                last = exc
                continue
            self.answered_by = model
            return response
        raise last or RuntimeError("no model configured")  # pragma: no cover - the loop returns

"""Environment that keeps litellm offline; set before litellm is imported (DESIGN §11)."""

from __future__ import annotations

import os
from typing import Any

from lucidgate.memory.tokens import bundled_tokenizer_dir

# litellm fetches several data files from the internet unless told to use its bundled
# copies, and in its default "DEV" mode loads a `.env` from the current directory into
# the environment at import. A daemon must do neither.
_LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_LOG": "ERROR",
}


def set_offline_environment() -> None:
    """Apply the defaults above without overriding what the operator set explicitly.

    Called once at process start, before any thread runs (a later ``os.environ`` edit races
    the threads that read it, e.g. a subprocess being spawned)."""
    for name, value in _LITELLM_ENV.items():
        os.environ.setdefault(name, value)
    folder = bundled_tokenizer_dir()  # token counting reads tiktoken's files from here
    if folder:
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", folder)


def import_litellm() -> Any:
    """Import litellm offline-safe: bundled data files, no .env loading, no telemetry.

    Cheap once litellm is loaded, so the error classifiers call it to reach its exception
    classes after a failed call."""
    set_offline_environment()
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.drop_params = True
    _defer_litellm_tokenizer()
    return litellm


class _DeferredEncoding:
    """Stands in for litellm's tokenizer until something really uses it.

    litellm fetches its ``cl100k_base`` (~40 MB, ~0.2 s) for every call on some routes
    (``hosted_vllm``) only to hand it along, and counts with it only when a response lacks
    usage. This loads the same encoding (``memory.tokens``) on first attribute access, so
    a process whose calls report usage never pays for it."""

    def __getattr__(self, name: str) -> Any:
        from lucidgate.memory.tokens import encoding

        return getattr(encoding(), name)


def _defer_litellm_tokenizer() -> None:
    import sys

    module = sys.modules.get("litellm.main")
    if module is not None and "encoding" not in vars(module):  # loaded for real already: keep it
        module.encoding = _DeferredEncoding()  # type: ignore[attr-defined]

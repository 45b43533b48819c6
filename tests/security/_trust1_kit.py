"""Shared parts of trust1's red-team tests: an instruction-following fake model and a gateway
served over real HTTP with the webhook on.

The model is the fake OpenAI server's ``Func`` hook: it reads every non-assistant message of
the request it is sent (system prompt, user messages, runtime blocks, tool results) and obeys
the first ``DO[<tool> <json arguments>]`` directive it finds there, if that tool is offered to
it and it has not already made that call in the conversation. It has no manners: whether a
directive is acted upon is decided entirely by what the gateway puts in front of it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lucidgate.config.schema import Config
from lucidgate.gateway.daemon import local_client
from lucidgate.gateway.daemon.serve import GatewayServer
from tests.fakes.llm import FakeLLMServer, Reply, Scripted, ToolCalls, message_text

TOKEN = "integration-token-trust1-0123"
LUCID = [sys.executable, "-c", "from lucidgate.gateway.cli import main; main()"]
_DIRECTIVE = re.compile(r"DO\[(\w+) (\{.*?\})\]")


def directive(tool: str, **arguments: Any) -> str:
    """The text an attacker writes for the obedient model to act on."""
    return f"DO[{tool} {json.dumps(arguments, separators=(',', ':'))}]"


def obedient(request: dict[str, Any]) -> Scripted:
    """Act on the first directive in the prompt whose tool is offered and not yet called."""
    offered = {t["function"]["name"] for t in request.get("tools") or []}
    made = {(c["function"]["name"], json.dumps(json.loads(c["function"]["arguments"]), sort_keys=True))
            for m in request["messages"] if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []}
    for message in request["messages"]:
        if message.get("role") == "assistant":
            continue
        for name, raw in _DIRECTIVE.findall(message_text(message)):
            args = json.loads(raw)
            if name in offered and (name, json.dumps(args, sort_keys=True)) not in made:
                return ToolCalls([(name, args)])
    return Reply("done")


def make_obedient(fake: FakeLLMServer) -> None:
    fake.default = obedient


def prompts_with(fake: FakeLLMServer, needle: str) -> list[str]:
    texts = [json.dumps(r.get("messages"), ensure_ascii=False) for r in fake.requests]
    return [t for t in texts if needle in t]


def tool_calls_made(fake: FakeLLMServer, since: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """Every tool call the model answered with in requests ``since`` on (read back from the
    next request's assistant message, or the final transcript)."""
    calls: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for request in fake.requests[since:]:
        for m in request["messages"]:
            for c in m.get("tool_calls") or []:
                if c["id"] not in seen:
                    seen.add(c["id"])
                    calls.append((c["function"]["name"], json.loads(c["function"]["arguments"])))
    return calls


def hook_document(workspace: Path, llm_base: str, **tools: Any) -> dict[str, Any]:
    """Webhook on (its callers are guests), keyword-only recall that syncs before each search
    (no watcher: what was just said is always indexed when the next turn asks)."""
    return {
        "agents": {"defaults": {
            "workspace": str(workspace), "model": "openai/fake-model", "llmRetryBaseDelayS": 0.01,
            "llmTimeoutS": 10,
            "memory": {"search": {"embedding": {"model": "none"}, "watch": False}}}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": llm_base}},
        "channels": {"webhook": {"token": TOKEN, "waitTimeoutS": 60, "rateLimitPerMin": 1000}},
        "tools": tools,
        "gateway": {"port": 0, "shutdownGraceS": 2},
    }


def load(document: dict[str, Any], path: Path) -> Config:
    """The config, and the same document as a file for a ``lucid`` subprocess."""
    path.write_text(json.dumps(document), encoding="utf-8")
    return Config.model_validate(document)


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("LUCIDGATE_") and not k.upper().endswith("_API_KEY")}
    env.update({"HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1",
                "PYTHONUNBUFFERED": "1"})
    return env


async def lucid(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """Run the real ``lucid`` CLI in a subprocess."""
    proc = await asyncio.create_subprocess_exec(
        *LUCID, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


@asynccontextmanager
async def serving(config: Any) -> AsyncIterator[tuple[GatewayServer, httpx.AsyncClient]]:
    """The real gateway over loopback HTTP, published in ``state/local.json`` so ``lucid agent``
    (the real CLI, as the owner) reaches it as it reaches a daemon."""
    async with GatewayServer(config, access_log=False) as server:
        local_client.publish(config.workspace, server.url, server.state.local_token)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                yield server, client
        finally:
            local_client.withdraw(config.workspace)


def guest_post(chat: str, sender: str, text: str) -> dict[str, str]:
    return {"chat_id": chat, "sender_id": sender, "text": text}


class HashEmbedder:
    """A tiny deterministic embedder (hashed bag of words): exercises the vector side of
    search without loading a model."""

    provider, model, baseline = "test", "hash16", 0.0
    dim = 16

    def __init__(self) -> None:
        self.texts: list[str] = []

    def _vec(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm else vec + 1 / np.sqrt(self.dim)

    def passages(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return np.stack([self._vec(t) for t in texts])

    def query(self, text: str) -> np.ndarray:
        return self._vec(text)

    def ready(self) -> bool:
        return True

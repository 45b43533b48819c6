"""web_fetch and web_search against loopback stand-ins: a local page server (reached only
because the test config allow-lists 127.0.0.1) and a local SearXNG-style search API. The
SSRF guard is tested without the allow-list: loopback, private, link-local (metadata) and
IPv6 loopback are refused directly, via a redirect, and via a name resolving to loopback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from lucidgate.config.schema import WebFetchConfig, WebSearchConfig
from lucidgate.gateway.app import build_gateway
from lucidgate.gateway.tools._netguard import NetGuard, RefusedURL
from lucidgate.gateway.tools.base import ToolRegistry
from lucidgate.gateway.tools.web import WebFetch, WebSearch
from lucidgate.gateway.tools.turn import TurnContext
from tests.fakes.channel import FakeChannel
from tests.fakes.llm import FakeLLMServer, Reply, ToolCalls

ARTICLE = """<html><head><title>Tomato care</title></head><body>
<nav><a href="/">Home</a> | <a href="/shop">Shop</a></nav>
<article><h1>Tomato care</h1>
<p>Water tomatoes deeply twice a week rather than a little every day; shallow watering keeps
the roots near the surface where they dry out. Mulch keeps the soil evenly moist.</p>
<p>Feed them every two weeks once the first fruits set, and pinch out side shoots so the
plant puts its strength into the fruit. See <a href="/more">more tips</a>.</p>
</article><footer>Copyright footer text</footer></body></html>"""


class Pages:
    """A small aiohttp site on 127.0.0.1 that records which paths were requested."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/article", self._article)
        app.router.add_get("/host", self._host)
        app.router.add_get("/hop", self._hop)
        app.router.add_get("/to-private", self._redirect(lambda: "http://169.254.169.254/latest/meta-data/"))
        app.router.add_get("/to-v6", self._redirect(lambda: f"http://[::1]:{self.port}/article"))
        app.router.add_get("/loop", self._redirect(lambda: "/loop"))
        app.router.add_get("/big", self._big)
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/image", self._image)
        app.router.add_get("/search", self._search)
        self.runner = web.AppRunner(app)
        self.port = 0

    async def start(self) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _hit(self, request: web.Request) -> None:
        self.hits.append((request.path, request.headers.get("Host", "")))

    async def _article(self, request: web.Request) -> web.Response:
        self._hit(request)
        return web.Response(text=ARTICLE, content_type="text/html")

    async def _host(self, request: web.Request) -> web.Response:
        self._hit(request)
        return web.Response(text=f"you asked for host {request.headers.get('Host')}", content_type="text/plain")

    async def _hop(self, request: web.Request) -> web.Response:
        self._hit(request)
        raise web.HTTPFound("/article")

    def _redirect(self, where: Callable[[], str]) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.Response:
            self._hit(request)
            raise web.HTTPFound(where())
        return handler

    async def _big(self, request: web.Request) -> web.StreamResponse:
        self._hit(request)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        for _ in range(100):
            await response.write(b"x" * 10_000)
        return response

    async def _slow(self, request: web.Request) -> web.Response:
        self._hit(request)
        await self.release.wait()
        return web.Response(text="late")

    async def _image(self, request: web.Request) -> web.Response:
        self._hit(request)
        return web.Response(body=b"\x89PNG\r\n", content_type="image/png")

    async def _search(self, request: web.Request) -> web.Response:
        self._hit(request)
        query = request.query.get("q", "")
        assert request.query.get("format") == "json"
        return web.json_response({"results": [
            {"title": f"{query} guide", "url": "https://example.org/guide", "content": "How to grow them."},
            {"title": "Second", "url": "https://example.org/2", "content": "More."},
        ]})


@pytest_asyncio.fixture
async def pages() -> AsyncIterator[Pages]:
    site = Pages()
    await site.start()
    yield site
    site.release.set()
    await site.runner.cleanup()


def ctx(workspace: Path) -> TurnContext:
    return TurnContext(session_key="cli:1", channel="cli", chat_id="1", sender_id="local",
                       role="owner", chat_type="private", workspace=workspace)


def fetcher(allow: list[str] | None = None, resolver: Any = None, **config: Any) -> ToolRegistry:
    tool = WebFetch(WebFetchConfig(allow_private=allow or [], **config), resolver=resolver)
    return ToolRegistry([tool])


def resolver_for(table: dict[str, str]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("no such host")
        return [table[host]]
    return resolve


# ----------------------------------------------------------------------------- web_fetch


async def test_fetch_returns_the_main_text_as_markdown(pages: Pages, workspace: Path) -> None:
    result = await fetcher(["127.0.0.1"]).execute(ctx(workspace), "web_fetch", {"url": pages.url("/article")})
    assert result.startswith(f"URL: {pages.url('/article')}")
    assert "Water tomatoes deeply twice a week" in result and "pinch out side shoots" in result
    assert "Copyright footer" not in result  # boilerplate dropped
    assert f"[more tips]({pages.url('/more')})" in result


async def test_a_name_is_resolved_once_and_the_host_header_kept(pages: Pages, workspace: Path) -> None:
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"]

    registry = fetcher(["127.0.0.1"], resolver=resolve)
    result = await registry.execute(ctx(workspace), "web_fetch",
                                    {"url": f"http://garden.test:{pages.port}/host"})
    assert f"you asked for host garden.test:{pages.port}" in result
    assert calls == ["garden.test"]


async def test_redirects_are_followed_hop_by_hop(pages: Pages, workspace: Path) -> None:
    result = await fetcher(["127.0.0.1"]).execute(ctx(workspace), "web_fetch", {"url": pages.url("/hop")})
    assert f"URL: {pages.url('/article')}" in result and "Tomato care" in result
    assert [p for p, _ in pages.hits] == ["/hop", "/article"]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:{port}/article",
    "http://10.1.2.3/",
    "http://192.168.0.10/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:{port}/article",
    "http://[::ffff:127.0.0.1]:{port}/article",
    "http://0.0.0.0:{port}/article",
])
async def test_private_addresses_are_refused_without_the_allow_list(
    pages: Pages, workspace: Path, url: str
) -> None:
    result = await fetcher().execute(ctx(workspace), "web_fetch", {"url": url.format(port=pages.port)})
    assert result.startswith("Error: ") and "refused" in result and "allowPrivate" in result, result
    assert pages.hits == []


async def test_a_name_resolving_to_loopback_is_refused(pages: Pages, workspace: Path) -> None:
    registry = fetcher(resolver=resolver_for({"innocent.example": "127.0.0.1"}))
    result = await registry.execute(ctx(workspace), "web_fetch",
                                    {"url": f"http://innocent.example:{pages.port}/article"})
    assert result.startswith("Error: innocent.example resolves to 127.0.0.1, a loopback address")
    assert pages.hits == []


async def test_a_mixed_dns_answer_is_refused() -> None:
    async def resolve(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "10.0.0.5"]

    with pytest.raises(RefusedURL, match="10.0.0.5, a private address"):
        await NetGuard(resolver=resolve).check("https://rebind.example/")


@pytest.mark.parametrize("path, refused_ip", [("/to-private", "169.254.169.254"), ("/to-v6", "::1")])
async def test_a_redirect_into_a_refused_range_is_not_followed(
    pages: Pages, workspace: Path, path: str, refused_ip: str
) -> None:
    # 127.0.0.1 itself is allowed here (the test server); the redirect target is not.
    result = await fetcher(["127.0.0.1/32"]).execute(ctx(workspace), "web_fetch", {"url": pages.url(path)})
    assert result.startswith(f"Error: {refused_ip} resolves to {refused_ip}"), result
    assert [p for p, _ in pages.hits] == [path]


async def test_limits_size_time_redirects_and_type(pages: Pages, workspace: Path) -> None:
    registry = fetcher(["127.0.0.1"], max_bytes=50_000, timeout_s=1, max_redirects=3)
    big = await registry.execute(ctx(workspace), "web_fetch", {"url": pages.url("/big")})
    assert big.startswith("Error: ") and "larger than 50,000 bytes" in big
    slow = await registry.execute(ctx(workspace), "web_fetch", {"url": pages.url("/slow")})
    assert slow.startswith("Error: ") and "did not answer within 1 s" in slow
    loop = await registry.execute(ctx(workspace), "web_fetch", {"url": pages.url("/loop")})
    assert "more than 3 redirects" in loop
    image = await registry.execute(ctx(workspace), "web_fetch", {"url": pages.url("/image")})
    assert "is image/png, not a page of text" in image
    for bad in ("file:///etc/passwd", "ftp://example.org/", "http://user:pw@example.org/"):
        assert (await registry.execute(ctx(workspace), "web_fetch", {"url": bad})).startswith("Error: ")


async def test_long_pages_are_cut_for_the_model(pages: Pages, workspace: Path) -> None:
    result = await fetcher(["127.0.0.1"], max_chars=500).execute(
        ctx(workspace), "web_fetch", {"url": pages.url("/big")})
    assert result.endswith("…[cut at 500 characters of 1,000,000]")
    assert len(result) < 700


# ----------------------------------------------------------------------------- web_search


async def test_search_through_a_searxng_stand_in(pages: Pages, workspace: Path) -> None:
    tool = WebSearch(WebSearchConfig(provider="searxng", api_base=pages.url(""), max_results=1))
    result = await ToolRegistry([tool]).execute(ctx(workspace), "web_search", {"query": "tomatoes"})
    assert result == ("Results for 'tomatoes' (searxng):\n1. tomatoes guide\n"
                      "   https://example.org/guide\n   How to grow them.")


# ----------------------------------------------------------------------------- the gateway


async def test_web_tools_are_owner_tools_and_search_is_off_without_a_provider(
    fake_llm: FakeLLMServer, make_config: Callable, workspace: Path, pages: Pages
) -> None:
    fake_llm.queue(ToolCalls([("web_fetch", {"url": pages.url("/article")})]),
                   Reply("Water deeply twice a week."))
    fake_llm.default = lambda request: Reply("ok")
    config = make_config(tools={"web": {"fetch": {"allowPrivate": ["127.0.0.1"]}}})
    gw = build_gateway(config)
    ch = FakeChannel(gw.parts.bus, name="cli")
    gw.add_channel("cli", ch)
    async with gw:
        await ch.say("how do I water tomatoes? see my link", sender_id="local")
        await ch.wait_replies(1)
        await ch.say("hello", sender_id="stranger", chat_id="2")
        await ch.wait_replies(2)
    owner_tools = {t["function"]["name"] for t in fake_llm.requests[0]["tools"]}
    assert "web_fetch" in owner_tools and "web_search" not in owner_tools
    fetched = next(m for m in fake_llm.requests[1]["messages"] if m.get("name") == "web_fetch")
    assert "Water tomatoes deeply" in fetched["content"]
    assert not fake_llm.requests[2].get("tools")  # a guest gets no web tools by default


async def test_guests_get_web_search_only_when_listed(make_config: Callable, pages: Pages,
                                                      workspace: Path) -> None:
    config = make_config(tools={"guestTools": ["web_search"],
                                "web": {"search": {"provider": "searxng", "apiBase": pages.url("")}}})
    gw = build_gateway(config)
    guest = TurnContext(session_key="cli:2", channel="cli", chat_id="2", sender_id="stranger",
                        role="guest", chat_type="private", workspace=workspace)
    names = {t["function"]["name"] for t in gw.parts.tools.schemas(guest)}
    assert names == {"web_search"}

"""``web_fetch`` and ``web_search`` (DESIGN §8): the web, read through narrow, capped doors.

Both are owner tools unless ``tools.guestTools`` names them. ``web_fetch`` downloads one
page through the SSRF guard (``_netguard``: resolve once, public addresses only unless
allow-listed, connect to the checked address, every redirect hop re-checked), stops at
``maxBytes`` and ``timeoutS``, and turns HTML into markdown with trafilatura (main text,
no menus or footers) in a worker thread. ``web_search`` asks the configured provider
(SearXNG's JSON API, Brave or Tavily) and is not registered at all without one.

Each call opens its own short-lived ``httpx.AsyncClient`` (no environment proxies: a proxy
would reach the host on its own terms and void the address check).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar
from urllib.parse import urljoin

import httpx
from pydantic import Field

from lucidgate.config.schema import WebFetchConfig, WebSearchConfig, WebToolsConfig
from lucidgate.gateway.errors import ToolError
from lucidgate.gateway.tools._netguard import NetGuard, RefusedURL, Resolver, pinned_request
from lucidgate.gateway.tools.base import Tool, ToolParams
from lucidgate.gateway.tools.turn import TurnContext

logger = logging.getLogger(__name__)

USER_AGENT = "lucidgate-web-fetch/1.0 (+personal assistant; one page on request)"
_TEXT_TYPES = ("text/plain", "text/markdown", "application/json", "text/csv", "application/xml",
               "text/xml")


class WebFetch:
    name: ClassVar[str] = "web_fetch"
    description: ClassVar[str] = (
        "Fetch a web page as markdown (main text, size-capped); private addresses are refused.")
    owner_only: ClassVar[bool] = False
    brings_outside_text: ClassVar[bool] = True  # a page's words are its author's

    class Params(ToolParams):
        url: str = Field(min_length=1, max_length=4000)

    def __init__(self, config: WebFetchConfig, *, resolver: Resolver | None = None) -> None:
        self.config = config
        self.guard = NetGuard(config.allow_private, resolver=resolver)

    async def run(self, ctx: TurnContext, params: Params) -> str:
        try:
            async with asyncio.timeout(self.config.timeout_s):
                final_url, content_type, body = await self._download(params.url)
        except TimeoutError:
            raise ToolError(f"{params.url} did not answer within {self.config.timeout_s:g} s") from None
        except RefusedURL as exc:
            raise ToolError(str(exc)) from None
        except httpx.HTTPError as exc:
            raise ToolError(f"fetching {params.url} failed: {type(exc).__name__}: {exc}") from None
        text = await asyncio.to_thread(_readable, body, content_type, final_url)
        if not text.strip():
            raise ToolError(f"{final_url} has no readable text (it may need JavaScript)")
        limit = self.config.max_chars
        if len(text) > limit:
            text = text[:limit] + f"\n…[cut at {limit:,} characters of {len(text):,}]"
        return f"URL: {final_url}\n\n{text}"

    async def _download(self, url: str) -> tuple[str, str, bytes]:
        timeout = httpx.Timeout(self.config.timeout_s)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False) as client:
            for _hop in range(self.config.max_redirects + 1):
                checked = await self.guard.check(url)
                request = pinned_request(client, checked, headers={
                    "User-Agent": USER_AGENT, "Accept": "text/html,text/plain;q=0.9,*/*;q=0.5"})
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect:
                        location = response.headers.get("location", "")
                        if not location:
                            raise ToolError(f"{url} redirects without saying where")
                        url = urljoin(url, location)
                        continue
                    if response.status_code >= 400:
                        raise ToolError(f"{url} answered HTTP {response.status_code} {response.reason_phrase}")
                    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
                    if content_type and not (content_type in _TEXT_TYPES or "html" in content_type):
                        raise ToolError(f"{url} is {content_type}, not a page of text")
                    return url, content_type, await self._read_capped(response, url)
                finally:
                    await response.aclose()
        raise ToolError(f"{url}: more than {self.config.max_redirects} redirects")

    async def _read_capped(self, response: httpx.Response, url: str) -> bytes:
        cap = self.config.max_bytes
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise ToolError(f"{url} is {int(declared):,} bytes; the limit is {cap:,} "
                            "(tools.web.fetch.maxBytes)")
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise ToolError(f"{url} is larger than {cap:,} bytes (tools.web.fetch.maxBytes); "
                                "not read further")
            chunks.append(chunk)
        return b"".join(chunks)


def _readable(body: bytes, content_type: str, url: str) -> str:
    """Blocking: main text of an HTML page as markdown; other text types as they are."""
    text = body.decode("utf-8", errors="replace")
    if content_type and "html" not in content_type:
        return text
    import trafilatura  # imported on first use: ~0.5 s, needed only by web_fetch

    extracted = trafilatura.extract(text, url=url, output_format="markdown", include_links=True,
                                    include_tables=True, favor_recall=True)
    title = None
    meta = trafilatura.extract_metadata(text)
    if meta is not None:
        title = meta.title
    if not extracted:
        return ""
    return f"# {title}\n\n{extracted}" if title and title not in extracted[:200] else extracted


class WebSearch:
    name: ClassVar[str] = "web_search"
    description: ClassVar[str] = (
        "Search the web; returns titles, URLs and snippets. Use web_fetch to read a result.")
    owner_only: ClassVar[bool] = False
    brings_outside_text: ClassVar[bool] = True

    class Params(ToolParams):
        query: str = Field(min_length=1, max_length=400)
        count: int | None = Field(None, ge=1, le=20, description="How many results (default from config)")

    _DEFAULT_BASE: ClassVar[dict[str, str]] = {
        "brave": "https://api.search.brave.com", "tavily": "https://api.tavily.com"}

    def __init__(self, config: WebSearchConfig) -> None:
        if config.provider is None:
            raise ValueError("web_search needs tools.web.search.provider")
        if config.provider == "searxng" and not config.api_base:
            raise ValueError("tools.web.search.apiBase must name your SearXNG instance")
        self.config = config
        self.provider = config.provider
        self.base = (config.api_base or self._DEFAULT_BASE[config.provider]).rstrip("/")

    async def run(self, ctx: TurnContext, params: Params) -> str:
        count = params.count or self.config.max_results
        try:
            async with httpx.AsyncClient(timeout=self.config.timeout_s, trust_env=False) as client:
                results = await self._search(client, params.query, count)
        except httpx.HTTPStatusError as exc:
            raise ToolError(f"the search provider ({self.provider}) answered HTTP "
                            f"{exc.response.status_code}") from None
        except (httpx.HTTPError, ValueError) as exc:
            raise ToolError(f"the search provider ({self.provider}) failed: {type(exc).__name__}: {exc}") from None
        if not results:
            return f"No results for {params.query!r}."
        lines = [f"Results for {params.query!r} ({self.provider}):"]
        for i, (title, url, snippet) in enumerate(results[:count], 1):
            lines.append(f"{i}. {title or url}\n   {url}" + (f"\n   {snippet}" if snippet else ""))
        return "\n".join(lines)

    async def _search(self, client: httpx.AsyncClient, query: str, count: int) -> list[tuple[str, str, str]]:
        key = self.config.api_key.get_secret_value()
        if self.provider == "searxng":
            response = await client.get(f"{self.base}/search", params={"q": query, "format": "json"},
                                        headers={"Accept": "application/json"})
            response.raise_for_status()
            items = _list(response.json(), "results")
            return [(_s(i, "title"), _s(i, "url"), _s(i, "content")) for i in items]
        if self.provider == "brave":
            response = await client.get(f"{self.base}/res/v1/web/search",
                                        params={"q": query, "count": count},
                                        headers={"Accept": "application/json", "X-Subscription-Token": key})
            response.raise_for_status()
            items = _list(response.json().get("web") or {}, "results")
            return [(_s(i, "title"), _s(i, "url"), _s(i, "description")) for i in items]
        response = await client.post(f"{self.base}/search", json={"query": query, "max_results": count},
                                     headers={"Authorization": f"Bearer {key}"})
        response.raise_for_status()
        items = _list(response.json(), "results")
        return [(_s(i, "title"), _s(i, "url"), _s(i, "content")) for i in items]


def _list(data: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise ValueError(f"the answer has no {key!r} list")
    return [i for i in data[key] if isinstance(i, dict)]


def _s(item: dict[str, Any], key: str) -> str:
    return " ".join(str(item.get(key) or "").split())[:500]


def web_tools(config: WebToolsConfig, *, resolver: Resolver | None = None) -> list[Tool]:
    """The web tools config turns on: web_fetch unless disabled, web_search with a provider."""
    tools: list[Tool] = []
    if config.fetch.enabled:
        tools.append(WebFetch(config.fetch, resolver=resolver))
    if config.search.provider is not None:
        tools.append(WebSearch(config.search))
    return tools

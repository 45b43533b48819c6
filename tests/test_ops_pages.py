"""No third-party code in any page the gateway serves, and a strict CSP on all of them.

The test does not list the pages: it walks the app's routes, fetches every GET route
without path parameters over real HTTP, and checks each one that answers HTML — so a page
added later (the console, a status page) is held to the same rule.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlparse

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Route

from tests.test_webhook import TOKEN, serving

# Attributes that make a browser load something (script, style, font, image, frame...).
LOADING_ATTRS = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
                 ("audio", "src"), ("video", "src"), ("object", "data"), ("embed", "src"), ("form", "action")}
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""", re.I)


class Loads(HTMLParser):
    """Every URL a page would load: tag attributes, inline CSS url()/@import, inline JS imports."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (tag, name) in LOADING_ATTRS:
                self.urls.append(value)
            if value and name == "style":
                self.urls += CSS_URL.findall(value)
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "style":
            self.urls += CSS_URL.findall(data)
        elif self._in == "script":
            self.inline.append(data)
            self.urls += re.findall(r"""(?:import\s*\(?\s*|fetch\(\s*)['"](https?://[^'"]+)""", data)


def _foreign(url: str, origin: str) -> bool:
    absolute = urljoin(origin + "/", url)
    parsed = urlparse(absolute)
    if parsed.scheme in ("data", "blob", "javascript", "about"):
        return False
    return f"{parsed.scheme}://{parsed.netloc}" != origin


def _html_pages(app: object) -> list[str]:
    paths = []
    for route in getattr(app, "routes"):
        if isinstance(route, (APIRoute, Route)) and "GET" in (route.methods or set()) and "{" not in route.path:
            paths.append(route.path)
    return sorted(set(paths))


def _csp(header: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in header.split(";") if part.strip()}


@pytest.fixture
def pages_config(make_config):
    return make_config(channels={"webhook": {"token": TOKEN, "callbackSecret": "cb-secret-0123456789"}},
                       gateway={"port": 0})


async def test_every_html_page_loads_only_from_the_gateway_under_a_strict_csp(pages_config):
    async with serving(pages_config) as (server, client):
        origin = server.url
        html_pages: dict[str, httpx.Response] = {}
        async with httpx.AsyncClient(base_url=origin, timeout=30) as anonymous:
            for path in _html_pages(server.app):
                response = await anonymous.get(path)
                if response.headers.get("content-type", "").startswith("text/html"):
                    html_pages[path] = response
            assert {"/docs", "/redoc"} <= set(html_pages), sorted(html_pages)
            for path, response in html_pages.items():
                assert response.status_code == 200, (path, response.status_code)
                parser = Loads()
                parser.feed(response.text)
                foreign = [u for u in parser.urls if _foreign(u, origin)]
                assert not foreign, f"{path} loads from another origin: {foreign}"
                csp = _csp(response.headers.get("content-security-policy", ""))
                assert csp.get("default-src") == ["'none'"] or csp.get("default-src") == ["'self'"], (path, csp)
                for directive in ("script-src", "style-src", "font-src", "connect-src", "img-src"):
                    sources = csp.get(directive, csp.get("default-src", []))
                    assert not any(s == "*" or s.startswith(("http:", "https:")) or "://" in s for s in sources), \
                        (path, directive, sources)
                assert "'unsafe-eval'" not in csp.get("script-src", []), path
                assert csp.get("frame-ancestors") == ["'none'"], path
                assert response.headers.get("x-content-type-options") == "nosniff", path
                # The same-origin assets each page loads exist and are served.
                for url in parser.urls:
                    if url.startswith("data:"):  # inline data (an empty favicon): loads nothing
                        continue
                    asset = await anonymous.get(urljoin(origin + path, url))
                    assert asset.status_code == 200, (path, url)
                # Inline scripts run only if the CSP allows them by hash, not blanket 'unsafe-inline'.
                if any(s.strip() for s in parser.inline) and path in ("/docs", "/redoc"):
                    assert "'unsafe-inline'" not in csp["script-src"] and any(
                        s.startswith("'sha256-") for s in csp["script-src"]), path


async def test_the_docs_assets_are_the_packaged_ones_and_carry_no_cdn_reference(pages_config):
    async with serving(pages_config) as (server, client):
        docs = (await client.get("/docs")).text
        assert "cdn.jsdelivr.net" not in docs and "fonts.googleapis.com" not in docs
        assert '"validatorUrl": null' in docs  # the validator badge would post the schema outside
        bundle = await client.get("/docs/assets/swagger-ui-bundle.js")
        assert bundle.status_code == 200 and bundle.headers["content-type"].startswith("text/javascript")
        assert len(bundle.content) > 100_000 and b"SwaggerUIBundle" in bundle.content
        assert (await client.get("/docs/assets/nope.js")).status_code == 404
        assert (await client.get("/docs/assets/..%2F__init__.py")).status_code == 404
        schema = await client.get("/openapi.json")
        assert "/docs/assets/{name}" not in schema.json()["paths"]


async def test_a_new_html_route_gets_the_default_csp(pages_config):
    from fastapi.responses import HTMLResponse

    from lucidgate.gateway.daemon.server import create_app

    app = create_app(pages_config)

    @app.get("/late-page")
    async def late() -> HTMLResponse:
        return HTMLResponse("<p>hi</p>")

    from lucidgate.gateway.daemon.serve import GatewayServer

    async with GatewayServer(pages_config, app=app, access_log=False) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            response = await client.get("/late-page")
    csp = _csp(response.headers["content-security-policy"])
    assert csp["default-src"] == ["'none'"] and csp["script-src"] == ["'self'"]

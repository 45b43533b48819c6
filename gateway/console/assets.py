"""The console's pages: plain ES modules and CSS shipped in the package, no build step.

Files are read once at mount from ``gateway/console/static/`` and served from memory
under ``/ui/``; ``/`` is the page itself and ``/console`` (the old address) redirects.
Only files that exist in the package can be named — there is no path to traverse.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

from fastapi import FastAPI, HTTPException
from fastapi.responses import RedirectResponse, Response

from lucidgate.gateway.console.context import TAG

TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8"}


def _collect(folder: Traversable, prefix: str, out: dict[str, bytes]) -> None:
    for entry in folder.iterdir():
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            _collect(entry, f"{name}/", out)
        elif any(entry.name.endswith(ext) for ext in TYPES):
            out[name] = entry.read_bytes()


def load_assets() -> dict[str, bytes]:
    assets: dict[str, bytes] = {}
    _collect(resources.files("lucidgate.gateway.console").joinpath("static"), "", assets)
    return assets


def add_static_routes(app: FastAPI) -> None:
    assets = load_assets()
    index = assets["index.html"]

    @app.get("/", tags=[TAG], summary="The web console", response_class=Response,
             responses={200: {"content": {"text/html": {}}}})
    async def page() -> Response:
        return Response(index, media_type=TYPES[".html"])

    @app.get("/console", tags=[TAG], summary="The console's old address (redirects to /)",
             response_class=RedirectResponse, status_code=308)
    async def old_address() -> RedirectResponse:
        return RedirectResponse("/", status_code=308)

    @app.get("/ui/{name:path}", tags=[TAG], summary="The console's scripts and styles",
             response_class=Response, responses={404: {"description": "No such file."}})
    async def asset(name: str) -> Response:
        data = assets.get(name)
        if data is None or name == "index.html":
            raise HTTPException(404, "no such console file")
        ext = name[name.rfind("."):]
        return Response(data, media_type=TYPES.get(ext, "application/octet-stream"))

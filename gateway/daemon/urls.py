"""The URL a person or a local command uses to reach a gateway bound to ``host:port``.

A gateway listening on every interface (``0.0.0.0`` or ``::``, as in a container) is not
reached *at* that address: a browser cannot open ``http://0.0.0.0:18790``, and the banner must
not suggest it. The loopback address of the same family reaches it from this machine (and, in
a container, through its published port from the host)."""

from __future__ import annotations

_WILDCARDS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1", "[::]": "::1"}


def local_url(host: str, port: int) -> str:
    """``http://host:port``, with a wildcard host turned into loopback and IPv6 bracketed."""
    host = _WILDCARDS.get(host, host).strip("[]")
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

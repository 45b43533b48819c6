"""Outbound-request guard against SSRF: resolve once, check, and connect to what was checked.

Used by webhook callbacks (and reusable by any tool that fetches a user-supplied URL, e.g.
``web_fetch``; it lives in ``channels`` because nothing may import ``gateway``).

The classic hole is a check that resolves a name, finds a public address, and then lets the
HTTP client resolve it *again* — a DNS-rebinding server answers 127.0.0.1 the second time.
So ``resolve_checked`` resolves the host exactly once, refuses private, loopback,
link-local (cloud metadata at 169.254.169.254 included), multicast and reserved addresses
unless the host is allow-listed, and returns the *pinned* address; ``pin`` then rewrites an
``httpx.Request`` to connect to that address while the ``Host`` header and the TLS server name
(SNI, and so certificate checks) stay the original host's. Redirects must not be followed by
the caller (a redirect is a new, unchecked destination).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

MAX_URL_LENGTH = 2048
RESOLVE_TIMEOUT_S = 5.0

# (host, port) -> addresses, in the resolver's order. Tests inject their own.
Resolver = Callable[[str, int], Awaitable[list[str]]]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(ValueError):
    """The URL may not be fetched (the message says why); not worth retrying."""


class Unresolved(OSError):
    """The name does not resolve right now; it may in a minute (retry later)."""


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def ip_refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public destination, or None when it is."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if ip.is_private:
        return "a private address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved or not ip.is_global:
        return "not a public address"
    return None


@dataclass(frozen=True, slots=True)
class Destination:
    """A checked URL: connect to ``ip``, present ``host``."""

    url: str
    host: str
    port: int
    ip: str


def _split(url: str) -> tuple[str, str, int]:
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"the URL is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("only http:// and https:// URLs are allowed")
    if not parts.hostname:
        raise Refused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise Refused("the URL must not contain credentials")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def resolve_checked(url: str, allow_hosts: Collection[str] = (), *,
                          resolver: Resolver | None = None) -> Destination:
    """Resolve ``url``'s host once and check every address; the first one is pinned.

    Raises ``Refused`` (do not retry) or ``Unresolved`` (retry later).
    """
    _, host, port = _split(url)
    allowed = host.lower() in {h.lower() for h in allow_hosts}
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                addresses = await (resolver or system_resolver)(host, port)
        except (OSError, TimeoutError) as exc:
            raise Unresolved(f"host {host} cannot be resolved ({type(exc).__name__})") from None
        if not addresses:
            raise Unresolved(f"host {host} cannot be resolved (no addresses)")
    if not allowed:
        for address in addresses:
            reason = ip_refusal(ipaddress.ip_address(address))
            if reason is not None:
                what = "is" if literal is not None else "resolves to"
                raise Refused(f"host {host} {what} {reason}")
    return Destination(url, host, port, addresses[0])


def pin(request: httpx.Request, dest: Destination) -> httpx.Request:
    """Make ``request`` connect to ``dest.ip``; Host header and SNI stay ``dest.host``."""
    if request.url.host != dest.ip:
        request.extensions["sni_hostname"] = dest.host
        request.url = request.url.copy_with(host=dest.ip)
    return request

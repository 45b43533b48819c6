"""An SSRF guard for requests the assistant makes on a model's (or a stranger's) say-so.

A URL the model names may point at the machine itself, the home network or a cloud
metadata service (``169.254.169.254``). ``NetGuard.check`` resolves the host **once**,
refuses the URL unless every address is public (or allow-listed in config), and returns
the address to connect to. ``pinned_request`` then connects to exactly that address while
keeping the name in the ``Host`` header and in TLS (SNI and certificate check), so a DNS
answer that changes between check and connect (rebinding) cannot move the request.
Redirects are never followed by the client: the caller re-checks every hop.

Allow-list entries are networks (``10.0.0.0/8``, ``127.0.0.1``) or exact host names.
The resolver is injectable, so tests can make a name resolve to loopback. What counts as
public, and the system resolver, are the ones the webhook's callback check uses
(``channels._netguard``); this guard adds network allow-lists and a model-facing message.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from lucidgate.channels._netguard import IPAddress, Resolver, ip_refusal, system_resolver

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RefusedURL(Exception):
    """The URL may not be fetched; the message says why, fit for the model and the user."""


@dataclass(frozen=True, slots=True)
class Checked:
    url: str
    scheme: str
    host: str  # as written in the URL (lower case, no brackets)
    port: int
    ip: IPAddress


class NetGuard:
    def __init__(self, allow: Iterable[str] = (), *, resolver: Resolver | None = None) -> None:
        self.networks: list[Network] = []
        self.hosts: set[str] = set()
        for entry in allow:
            try:
                self.networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                self.hosts.add(entry.strip().lower().rstrip("."))
        self.resolver = resolver or system_resolver

    def _allowed(self, host: str, ip: IPAddress) -> bool:
        if host in self.hosts:
            return True
        plain = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else ip
        return any(plain in net for net in self.networks)

    async def check(self, url: str) -> Checked:
        """The URL's address, resolved once; raises ``RefusedURL`` when it may not be reached."""
        try:
            parts = urlsplit(url.strip())
            port = parts.port
        except ValueError as exc:
            raise RefusedURL(f"{url!r} is not a valid URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise RefusedURL(f"only http and https URLs can be fetched, not {scheme or 'a bare path'!r}")
        host = (parts.hostname or "").lower().rstrip(".")
        if not host:
            raise RefusedURL(f"{url!r} has no host name")
        if parts.username or parts.password:
            raise RefusedURL("URLs with a user name or password are not fetched")
        port = port or (443 if scheme == "https" else 80)
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                found = await self.resolver(host, port)
            except OSError as exc:
                raise RefusedURL(f"the host {host!r} could not be resolved ({exc})") from None
            addresses = []
            for text in found:
                try:
                    addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
                except ValueError:
                    continue
            if not addresses:
                raise RefusedURL(f"the host {host!r} has no address")
        for ip in addresses:  # every answer must pass: a mixed answer is a rebinding attempt
            why = ip_refusal(ip)
            if why is not None and not self._allowed(host, ip):
                raise RefusedURL(
                    f"{host} resolves to {ip}, {why}; fetching it is refused (an operator can "
                    "allow it in tools.web.fetch.allowPrivate)")
        return Checked(url=url.strip(), scheme=scheme, host=host, port=port, ip=addresses[0])


def pinned_request(client: httpx.AsyncClient, checked: Checked, *, method: str = "GET",
                   headers: dict[str, str] | None = None) -> httpx.Request:
    """A request to ``checked.ip`` that still names ``checked.host`` (Host header, SNI, cert)."""
    original = httpx.URL(checked.url)
    netloc_ip = f"[{checked.ip}]" if checked.ip.version == 6 else str(checked.ip)
    url = original.copy_with(host=netloc_ip.strip("[]"), port=checked.port)
    default_port = 443 if checked.scheme == "https" else 80
    host_header = checked.host if checked.port == default_port else f"{checked.host}:{checked.port}"
    if ":" in checked.host:  # an IPv6 literal in the URL
        host_header = f"[{checked.host}]" + ("" if checked.port == default_port else f":{checked.port}")
    return client.build_request(method, url, headers={**(headers or {}), "Host": host_header},
                                extensions={"sni_hostname": checked.host})

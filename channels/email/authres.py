"""Whether the receiving mail server authenticated a mail's From domain.

Anyone can write any address into From. A mail server that checks DKIM and SPF records the
result in an ``Authentication-Results`` header (RFC 8601) that begins with its own name, the
*authserv-id*; a server must remove headers that claim its name from incoming mail, so only
a header with the configured ``authservId`` is believed — every other one may be the
sender's own invention and is ignored.

A mail counts as authenticated when such a header says ``dkim=pass`` for a signing domain
(``header.d``/``header.i``) aligned with the From domain, ``spf=pass`` for an envelope domain
(``smtp.mailfrom``) aligned with it, or ``dmarc=pass`` for the From domain itself (DMARC
pass means one of the two aligned). Aligned: the same domain, or one a subdomain of the other
(relaxed alignment, DMARC's default; without a public-suffix list, a bare top-level domain
never aligns).
"""

from __future__ import annotations

import re
from email.message import EmailMessage

__all__ = ["authenticated"]

_RESULT = re.compile(r"\b(dkim|spf|dmarc)\s*=\s*([a-z]+)\b(.*)", re.IGNORECASE | re.DOTALL)
_PROP = re.compile(r"\b(header\.d|header\.i|header\.from|smtp\.mailfrom|smtp\.from)\s*=\s*\"?([^\s;\"]+)",
                   re.IGNORECASE)


def _aligned(domain: str, from_domain: str) -> bool:
    domain, from_domain = domain.lower().strip(".").rpartition("@")[2], from_domain.lower()
    if not domain or "." not in domain:
        return False
    return domain == from_domain or from_domain.endswith("." + domain) or domain.endswith("." + from_domain)


def _results(header: str) -> tuple[str, list[str]]:
    """The header's authserv-id (lowercased) and its ``;``-separated results."""
    parts = [p.strip() for p in re.sub(r"\([^)]*\)", " ", header).split(";")]
    authserv = parts[0].split()[0].lower() if parts and parts[0].split() else ""
    return authserv, parts[1:]


def authenticated(msg: EmailMessage, from_domain: str, authserv_id: str) -> bool:
    """True when an ``Authentication-Results`` header from ``authserv_id`` passes the From domain."""
    if not authserv_id or not from_domain:
        return False
    for raw in msg.get_all("Authentication-Results") or ():
        authserv, results = _results(str(raw))
        if authserv != authserv_id.lower():
            continue
        for result in results:
            found = _RESULT.search(result)
            if found is None or found.group(2).lower() != "pass":
                continue
            method, props = found.group(1).lower(), dict(
                (k.lower(), v) for k, v in _PROP.findall(found.group(3)))
            if method == "dkim" and any(_aligned(props[k], from_domain) for k in ("header.d", "header.i")
                                        if k in props):
                return True
            if method == "spf" and any(_aligned(props[k], from_domain) for k in ("smtp.mailfrom", "smtp.from")
                                       if k in props):
                return True
            if method == "dmarc" and props.get("header.from", "").lower() == from_domain.lower():
                return True
    return False

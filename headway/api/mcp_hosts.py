"""`/mcp`'s Host and Origin check (DNS-rebinding protection): a web page whose name
rebinds to the server cannot drive it, since its requests carry its own name.

Patterns are what a Host header holds: `name`, `name:port`, or `name:*` (any port), IPv6
addresses in brackets. A header matches a pattern when its whole name (case aside) and
its port are the pattern's: `127.0.0.1:*` does not answer `127.0.0.1:8850.evil.com`.
An `Origin` (sent by browsers) matches when its host and port do, whatever its scheme
(`http` or `https`); a request without one is not a browser's.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from starlette.datastructures import Headers

from ..config import Settings
from ..domain.errors import Forbidden, HeadwayError, Misdirected

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

# A Host header: a name or a bracketed IPv6 address, then an optional port.
_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9._-]+)(?::([0-9]{1,5}))?")


def allowed_hosts(settings: Settings) -> tuple[str, ...] | None:
    """The patterns `/mcp` answers; None when the check is off (`*`).

    - `HEADWAY_MCP_ALLOWED_HOSTS` set: exactly those.
    - Unset: the loopback names, the address the server listens on, and the host of
      `HEADWAY_PUBLIC_URL` if set, each with any port. Behind a load balancer with a
      name of its own, that name must be listed (or be `HEADWAY_PUBLIC_URL`'s).
    """
    patterns = settings.mcp_allowed_hosts
    if patterns == ("*",):
        return None
    if patterns is not None:
        return patterns
    names = [*LOOPBACK_NAMES, _bracketed(settings.host.strip("[]").lower())]
    if settings.public_url is not None and (public := urlsplit(settings.public_url).hostname):
        names.append(_bracketed(public))
    return tuple(p for name in dict.fromkeys(names) for p in (name, f"{name}:*"))


def answered(settings: Settings, host: str) -> bool:
    """Whether the server answers this Host header (`allowed_hosts`): what `/client` may
    build an address from."""
    patterns = allowed_hosts(settings)
    return patterns is None or _matches(patterns, host)


def refusal(patterns: tuple[str, ...] | None, headers: Headers) -> HeadwayError | None:
    """Why a request with these headers may not use `/mcp` (421 for its Host, 403 for
    its Origin), or None when it may."""
    if patterns is None:
        return None
    if not _matches(patterns, headers.get("host", "")):
        return Misdirected(
            "Invalid Host header. This server answers MCP only for the hosts in "
            "HEADWAY_MCP_ALLOWED_HOSTS."
        )
    origin = headers.get("origin")
    if origin is not None:
        scheme, _, host = origin.partition("://")
        if scheme.lower() not in ("http", "https") or not _matches(patterns, host):
            return Forbidden(
                "Invalid Origin header. This server answers MCP only for origins of "
                "HEADWAY_MCP_ALLOWED_HOSTS."
            )
    return None


def _matches(patterns: tuple[str, ...], host: str) -> bool:
    found = _HOST.fullmatch(host.lower())
    if found is None or int(found[2] or 0) > 65535:
        return False
    name, port = found.groups()
    candidates = {name} if port is None else {f"{name}:{port}", f"{name}:*"}
    return any(pattern.lower() in candidates for pattern in patterns)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host

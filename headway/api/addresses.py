"""Who a request's client is: the address rates are counted for, and the network what
a client holds is capped for.

The peer's address, or, from the proxies named in HEADWAY_TRUSTED_PROXIES (and from no
one else), the nearest untrusted address in `X-Forwarded-For`, `Forwarded` or
`X-Real-IP`. IPv6 addresses count per /64, the block one subscriber usually holds; a
network (`network_of`) is an IPv6 /48 (a site's usual block: its 65,536 /64s count as
one there), and an IPv4 address is its own network.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import Scope

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ClientAddresses:
    """The client address of a request, believing forwarding headers only from
    `trusted_proxies` (networks, as HEADWAY_TRUSTED_PROXIES names them)."""

    def __init__(self, trusted_proxies: Sequence[str] = ()) -> None:
        self._proxies: tuple[Network, ...] = tuple(
            ipaddress.ip_network(proxy, strict=False) for proxy in trusted_proxies
        )

    def address_of(self, scope: Scope) -> str:
        """The client address of a request (see `client_address`)."""
        client = scope.get("client")
        peer = client[0] if client else None
        if not self._proxies and peer is not None and ":" not in peer:
            return peer  # the usual case, on the path of every read and report
        return self.client_address(peer, scope["headers"] if self._proxies else ())

    def client_address(self, peer: str | None, headers: Iterable[tuple[bytes, bytes]] = ()) -> str:
        """The address rates are counted for: the peer's, or, when the peer is a trusted
        proxy, the nearest address its forwarding header names (`forwarded_hops`) that is
        not a trusted proxy. A hop that is not an address ends the walk: nothing further
        along is believed, and the nearest address believed so far counts. An IPv6
        address stands for its /64; an IPv4-mapped one (`::ffff:192.0.2.1`, as a
        dual-stack listener writes IPv4 clients) is its IPv4 address."""
        address = _unmapped(peer) if peer else "unknown"
        if self._proxies and self._trusted(address):
            for hop in reversed(forwarded_hops(headers)):
                if not hop:
                    continue
                if not _is_address(hop):
                    break  # not an address: believe nothing further along
                address = _unmapped(hop)
                if not self._trusted(address):
                    break
        if ":" in address and _is_address(address):
            return str(ipaddress.ip_network(f"{address}/64", strict=False))
        return address

    def _trusted(self, address: str) -> bool:
        if not _is_address(address):
            return False
        return any(ipaddress.ip_address(address) in network for network in self._proxies)


def _unmapped(address: str) -> str:
    """An IPv4-mapped IPv6 address as its IPv4 address; any other text as it is."""
    if ":" not in address:
        return address
    try:
        mapped = ipaddress.IPv6Address(address).ipv4_mapped
    except ValueError:
        return address
    return address if mapped is None else str(mapped)


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


FORWARDING_HEADERS = (b"x-forwarded-for", b"forwarded", b"x-real-ip")
"""The headers a proxy names the client in, in the order they are believed: the first
of them a request carries is read, the others ignored (they may be the client's own)."""


def forwarded_hops(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The addresses a request passed through by its forwarding header (the first of
    FORWARDING_HEADERS it carries, every line of it), nearest last: `X-Forwarded-For`'s
    hops, `Forwarded`'s `for=` nodes (RFC 7239: quotes, brackets and ports taken off; an
    element without one, or `unknown`, is a hop that is not an address), `X-Real-IP`."""
    found: dict[bytes, list[str]] = {}
    for name, value in headers:
        if name in FORWARDING_HEADERS:
            found.setdefault(name, []).append(value.decode("latin-1"))
    for name in FORWARDING_HEADERS:
        if name in found:
            hops = [hop.strip() for value in found[name] for hop in value.split(",")]
            return [_forwarded_node(hop) for hop in hops] if name == b"forwarded" else hops
    return []


def _forwarded_node(element: str) -> str:
    """The address in one `Forwarded` element's `for=` (`unknown` when it has none)."""
    for pair in element.split(";"):
        name, _, node = pair.partition("=")
        if name.strip().lower() == "for":
            node = node.strip().strip('"')
            if node.startswith("["):
                inside, closed, _ = node[1:].partition("]")
                return inside if closed else "unknown"
            return node.partition(":")[0] if node.count(":") == 1 else node
    return "unknown" if element else ""


def network_of(client: str) -> str:
    """The network a client address belongs to: an IPv6 /64's /48, else the address."""
    if client.endswith("/64"):
        try:
            return str(ipaddress.ip_network(client).supernet(new_prefix=48))
        except ValueError:
            return client
    return client

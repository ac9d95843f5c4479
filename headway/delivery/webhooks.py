"""Webhook signing (Standard Webhooks), the address guard against request forgery, and
the name lookups of webhooks, on a small pool of threads of their own."""

from __future__ import annotations

import asyncio
import base64
import functools
import ipaddress
import re
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..domain.errors import Unprocessable

if TYPE_CHECKING:
    import httpx

SECRET_PREFIX = "whsec_"

# A name lookup: (host, port) -> what `socket.getaddrinfo` answers for a stream socket.
Resolver = Callable[[str, int], Awaitable[list[tuple[Any, ...]]]]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Webhook name lookups that can run at once. The system's resolver cannot be interrupted:
# a lookup that hangs holds its thread until the resolver gives up, while the attempt
# that asked has long ended at its timeout. A receiver has at most 4 attempts in flight
# (see `worker`), so a few slow names cannot take every thread.
LOOKUP_THREADS = 16

T = TypeVar("T")


def once(make: Callable[[], T]) -> Callable[[], T]:
    """`make`, called on the first call only (under a lock: once, whatever the threads),
    and what it made at every call after; one that raised is called again next time. For
    what a process makes once, when first needed: a pool of threads, a module loaded."""
    lock = threading.Lock()
    made: list[T] = []

    @functools.wraps(make)
    def get() -> T:
        if not made:
            with lock:
                if not made:
                    made.append(make())
        return made[0]

    return get


@once
def _lookup_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(LOOKUP_THREADS, thread_name_prefix="headway-lookup")


async def lookup(host: str, port: int) -> list[tuple[Any, ...]]:
    """The system's lookup of `host` for a stream socket, on the webhooks' own threads:
    never on the event loop's default executor, which serves requests and `/up`."""
    # `socket.getaddrinfo` as it is now: `notify.guard` wraps it (a no-op off its threads).
    call = functools.partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    return await asyncio.get_running_loop().run_in_executor(_lookup_pool(), call)


def new_secret() -> str:
    """A fresh signing secret: `whsec_` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signed_headers(secret: str, event_id: str, timestamp_s: int, body: str) -> dict[str, str]:
    """The Standard Webhooks headers for one delivery attempt of `body`."""
    # Here, not at the top: the address guard below serves `headway channels test` too,
    # which runs where only the client is installed.
    from standardwebhooks import Webhook

    moment = datetime.fromtimestamp(timestamp_s, tz=UTC)
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": Webhook(secret).sign(event_id, moment, body),
        "content-type": "application/json",
        "user-agent": "Headway-Webhooks/1",
    }


class RefusedAddress(Exception):
    """The URL's host is, or resolves to, an address webhooks may not reach."""


def check_url_syntax(url: str) -> httpx.URL:
    """The parsed URL, or Unprocessable if it is not an absolute http(s) URL whose host is
    an IP address or a valid host name."""
    import httpx  # here: only webhooks need it, and it costs several MB of memory

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):  # an IDNA error is a ValueError
        raise Unprocessable("url is not a valid URL.") from None
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise Unprocessable("url must be an absolute http:// or https:// URL.")
    try:
        valid = _is_host(parsed.raw_host) and bool(parsed.host)  # `host` decodes `xn--` labels
    except ValueError:  # an `xn--` label that is not IDNA
        valid = False
    if not valid:
        raise Unprocessable(
            f"url's host {parsed.raw_host.decode('ascii', 'replace')!r} is not a valid host name."
        )
    return parsed


# One label of a host name as DNS carries it (IDNA names arrive here already in `xn--` form).
# Underscores are not in the host name rules, but real names hold them and resolve.
_LABEL = re.compile(rb"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?", re.IGNORECASE)


def _is_host(raw_host: bytes) -> bool:
    """True for an IP address, or a name of at most 253 characters whose labels are each
    1 to 63 letters, digits, hyphens or underscores, not starting or ending with a hyphen."""
    try:
        ipaddress.ip_address(raw_host.decode("ascii"))
        return True
    except (UnicodeDecodeError, ValueError):
        pass
    name = raw_host.removesuffix(b".")  # a fully qualified name may end with the root's dot
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in name.split(b"."))


async def check_destination(
    url: httpx.URL, *, allow_private: bool, resolve: Resolver | None = None
) -> Address | None:
    """Raise RefusedAddress unless every address `url`'s host resolves to is public, and
    return one of them to connect to (None when `allow_private` turns the guard off).

    Checked at registration and again before each delivery, since what a name resolves
    to can change; a delivery then connects to an address checked (see `addresses` and
    `pinned`), so a name that changes again in between cannot redirect it.

    `resolve` looks the name up (default: `lookup`, on the webhooks' own threads);
    channels pass one that runs on theirs.
    """
    if allow_private:
        return None
    return (await addresses(url, allow_private=False, resolve=resolve))[0]


async def addresses(
    url: httpx.URL, *, allow_private: bool, resolve: Resolver | None = None
) -> list[Address]:
    """The addresses to connect to for `url`, in the resolver's order: its host's own if
    it is an IP address, else what `resolve` (default: `lookup`) answers. RefusedAddress
    if the host does not resolve, or (unless `allow_private`) if any address it has is
    not public."""
    # The name in its ASCII (`xn--`) form: the resolver's own IDNA codec refuses names
    # that IDNA 2008 allows, and raises UnicodeError for a name it cannot encode.
    host = url.raw_host.decode("ascii", "replace")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        found: list[Address] = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = await (resolve or lookup)(host, port)
        except OSError as exc:
            raise RefusedAddress(
                f"the host {host} does not resolve ({exc.strerror or exc})"
            ) from None
        except ValueError:  # UnicodeError included: a stored URL from before names were checked
            raise RefusedAddress(f"the host {host} is not a valid host name") from None
        found = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    if not allow_private:
        refuse_non_public(host, found)
    if not found:
        raise RefusedAddress(f"the host {host} does not resolve")
    return found


def pinned(url: httpx.URL, address: Address) -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
    """The request for `url` sent to `address`: the URL with the address as host, the
    original `Host` header, and (for https) the TLS server name the certificate must match."""
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return url.copy_with(host=str(address)), {"host": url.netloc.decode()}, extensions


PRIVATE_TARGETS_SETTING = "HEADWAY_ALLOW_PRIVATE_TARGETS"
"""The setting that lets webhooks and channels reach non-public addresses (its older name,
HEADWAY_WEBHOOK_ALLOW_PRIVATE, works too: see `config`)."""


def refuse_non_public(host: str, found: Iterable[Address]) -> None:
    """Raise RefusedAddress if any of `found`, the addresses of `host`, is not public: the
    one check of webhooks and channels, at registration and at delivery. The refusal
    names the host and the setting that allows it, never the address: what a resolver
    inside the network answers is not for the client to learn."""
    if not all(is_public(address) for address in found):
        raise RefusedAddress(
            f"the host {host} resolves to a non-public address "
            f"({PRIVATE_TARGETS_SETTING}=true allows private targets)"
        )


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for a globally routable unicast address, without a zone id (a zone names a
    link of this host, whatever the address), outside the deprecated and reserved ranges
    Python still calls global (`_RESERVED`).

    An IPv6 address that carries an IPv4 address is judged by what it carries too, so that
    no encoding reaches a refused IPv4 address:

    - IPv4-mapped `::ffff:0:0/96` and NAT64 `64:ff9b::/96` reach the IPv4 address itself
      (a DNS64 resolver answers the latter for every IPv4-only name), and 6to4
      `2002::/16` the IPv4 address of its relay: each judged as that IPv4 address alone
      (Python's own tables call 6to4 private in early 3.11 releases, global in later ones:
      they are not asked).
    - IPv4-compatible `::a.b.c.d` (deprecated), Teredo `2001::/32` (tunnelled through a
      server and a NAT whose IPv4 addresses it carries, obfuscated) and local-use NAT64
      `64:ff9b:1::/48` (its prefix length, and so where the IPv4 address sits, is a local
      choice): always refused.
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None or any(address in net for net in _ALWAYS_REFUSED):
            return False
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        elif address in _NAT64:
            address = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
        elif address.sixtofour is not None:
            address = address.sixtofour
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_unspecified
        or any(address in network for network in _RESERVED)
    )


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_ALWAYS_REFUSED = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible, and :: and ::1
    ipaddress.IPv6Network("2001::/32"),  # Teredo
    ipaddress.IPv6Network("64:ff9b:1::/48"),  # local-use NAT64
)
_RESERVED = (
    ipaddress.IPv4Network("192.88.99.0/24"),  # 6to4 relay anycast, deprecated (RFC 7526)
    ipaddress.IPv6Network("fec0::/10"),  # site-local, deprecated (RFC 3879)
    ipaddress.IPv6Network("3fff::/20"),  # documentation (RFC 9637)
)

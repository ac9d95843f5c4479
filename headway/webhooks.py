"""Webhook signing (Standard Webhooks) and the address guard against request forgery."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import secrets
import socket
from datetime import UTC, datetime

import httpx
from standardwebhooks import Webhook

from .errors import Unprocessable

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A fresh signing secret: `whsec_` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def signed_headers(secret: str, event_id: str, timestamp_s: int, body: str) -> dict[str, str]:
    """The Standard Webhooks headers for one delivery attempt of `body`."""
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
    """The parsed URL, or Unprocessable if it is not an absolute http(s) URL."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise Unprocessable("url is not a valid URL.") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise Unprocessable("url must be an absolute http:// or https:// URL.")
    return parsed


async def check_destination(
    url: httpx.URL, *, allow_private: bool
) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Raise RefusedAddress unless every address `url`'s host resolves to is public, and
    return one of them to connect to (None when `allow_private` turns the guard off).

    Checked at registration and again before each delivery, since what a name resolves
    to can change; a delivery then connects to the address checked (see `pinned`), so a
    name that changes again in between cannot redirect it.
    """
    if allow_private:
        return None
    host = url.host
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise RefusedAddress(f"the host {host} does not resolve ({exc.strerror or exc})") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
    for address in addresses:
        if not is_public(address):
            raise RefusedAddress(f"the host {host} resolves to the non-public address {address}")
    if not addresses:
        raise RefusedAddress(f"the host {host} does not resolve")
    return addresses[0]


def pinned(
    url: httpx.URL, address: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> tuple[httpx.URL, dict[str, str], dict[str, str]]:
    """The request for `url` sent to `address`: the URL with the address as host, the
    original `Host` header, and (for https) the TLS server name the certificate must match."""
    extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return url.copy_with(host=str(address)), {"host": url.netloc.decode()}, extensions


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """True for a globally routable unicast address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_unspecified
    )

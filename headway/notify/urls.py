"""Channel URLs: which Apprise URLs a channel may hold, how they are shown, and which hosts
they make Headway connect to (each checked like a webhook's).

A channel's URL holds its owner's tokens. It is kept as given (to send with) and shown
only as `ChannelURL.redacted`; it is never logged, and Apprise's own logger, whose
messages hold URLs, is cut off from the application's logs when Apprise is first loaded
(see `apprise_module`).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import warnings
from collections.abc import Collection
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

from ..delivery import webhooks
from ..domain.errors import Unprocessable
from . import guard
from .schemes import DEFAULT_SCHEMES, NEVER_SCHEMES

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

MAX_URL_CHARS = 2048

# Schemes whose plugin connects to a host the URL names (self-hosted or chosen endpoint);
# any other scheme whose plugin also speaks plain HTTP (`protocol`) is treated the same.
_USER_HOST = frozenset(
    {
        "json", "jsons", "form", "forms", "xml", "xmls",
        "gotify", "gotifys", "mmost", "mmosts", "rocket", "rockets",
        "signal", "signals", "workflow", "workflows",
    }
)  # fmt: skip
# Schemes of a hosted service: the URL's host is a token, the service's hosts are fixed.
_HOSTED = frozenset({"slack", "discord", "tgram", "gchat", "pover", "pbul", "wxteams", "webex"})
_ALWAYS_HTTPS = frozenset({"workflow", "workflows"})

_SCHEME = re.compile(r"\s*([a-z][a-z0-9+.-]{0,31})://", re.IGNORECASE)


class Target(NamedTuple):
    """A host a channel connects to: its name in ASCII (IDNA) form, lowercase, or an IP
    address, and the port."""

    host: str
    port: int


@dataclass(frozen=True)
class ChannelURL:
    """A channel's Apprise URL, checked.

    `url` is the URL as given, tokens included: send with it, never show or log it.
    `scheme` is the plugin's (a native `https://hooks.slack.com/...` URL is `slack`),
    `service` Apprise's name for it. `hosts` are the hosts the URL has Headway connect
    to when its owner picks them (a self-hosted server, an SMTP server, an HTTP
    endpoint); it is empty for a hosted service, whose hosts are the service's own.
    """

    url: str = field(repr=False)
    scheme: str
    service: str
    redacted: str
    hosts: tuple[Target, ...]

    @property
    def hosted(self) -> bool:
        """True when the URL names no host of its owner's choosing."""
        return not self.hosts


def check_channel_url(url: str, allowed_schemes: Collection[str] = DEFAULT_SCHEMES) -> ChannelURL:
    """The checked URL, or Unprocessable (422) saying why it cannot be a channel's: Apprise
    cannot read it, its scheme is not in `allowed_schemes` (or is never allowed), Apprise
    refuses its parts, or a host it names is not a valid host name.

    Where the URL resolves is checked apart, by `check_channel_hosts`. The first call
    loads Apprise (about 0.4 s and 25 MB): run this on `guard.run` to keep that off the
    event loop.
    """
    if not isinstance(url, str) or not url.strip():
        raise Unprocessable("url must be an Apprise URL, such as ntfys://ntfy.sh/my-topic.")
    if len(url) > MAX_URL_CHARS:
        raise Unprocessable(f"url is longer than {MAX_URL_CHARS} characters.")
    found = _SCHEME.match(url)
    if found is None:
        raise Unprocessable(
            "url is not an Apprise URL: it must start with a service's scheme, "
            "such as slack://, ntfys:// or json://."
        )
    _refuse_never(found.group(1).lower())
    apprise = apprise_module()
    from apprise.plugins import N_MGR, url_to_dict

    parsed = url_to_dict(url, secure_logging=True)
    if not parsed:
        literal = found.group(1).lower()
        if literal in ("http", "https"):
            raise Unprocessable(
                "url is not an Apprise URL Headway can use: a plain web address is sent "
                "to with json:// or jsons:// (or form://, xml://) in place of http(s)://."
            )
        if literal not in N_MGR:
            raise Unprocessable(f"url's scheme {literal}:// is not one Apprise knows.")
        raise Unprocessable(
            f"url is not a valid {N_MGR[literal].service_name} URL: Apprise cannot read it."
        )
    scheme = str(parsed["schema"]).lower()
    _refuse_never(scheme)
    plugin_class = N_MGR[scheme]
    if not plugin_class.__module__.startswith("apprise.plugins."):
        raise Unprocessable(f"url's scheme {scheme}:// is a custom plugin: never allowed.")
    allowed = {s.lower() for s in allowed_schemes} - NEVER_SCHEMES
    if scheme not in allowed:
        raise Unprocessable(
            f"url's service {scheme}:// ({plugin_class.service_name}) is not allowed on "
            f"this server. Allowed: {', '.join(sorted(allowed)) or 'none'}."
        )
    plugin = _instantiate(apprise, parsed, plugin_class.service_name)
    hosts = tuple(_checked_target(host, port) for host, port in _targets(scheme, plugin))
    return ChannelURL(
        url=url,
        scheme=scheme,
        service=plugin_class.service_name,
        # A URL that names no host to connect to holds a token or a topic where its host
        # would be (slack://, ntfy://topic), unless it is the service's own https:// URL.
        redacted=redact(url, host=not hosts and found.group(1).lower() not in ("http", "https")),
        hosts=hosts,
    )


async def check_channel_hosts(
    channel: ChannelURL, *, allow_private: bool, resolve: webhooks.Resolver | None = None
) -> dict[str, Address]:
    """The addresses to connect to, `{host: address}`, for each host of `channel.hosts`,
    after the webhooks' public-address check (`webhooks.addresses`) passes on
    each; raises `webhooks.RefusedAddress` for the first refused. Empty when
    `allow_private` turns the check off, or for a hosted service (whose hosts are checked
    as it connects: see `guard`).

    The lookups run on the sending threads (`guard.resolve`), never on the event loop's
    default executor; `resolve` replaces that lookup (a test's DNS).
    """
    if allow_private:
        return {}
    import httpx

    pins: dict[str, Address] = {}
    for target in channel.hosts:
        url = httpx.URL(f"https://{_bracketed(target.host)}:{target.port}/")
        found = await webhooks.addresses(url, allow_private=False, resolve=resolve or guard.resolve)
        pins[target.host] = found[0]
    return pins


def plugin_for(channel: ChannelURL) -> Any:
    """A fresh Apprise plugin for a checked channel URL (one per send: plugins keep state)."""
    apprise = apprise_module()
    from apprise.plugins import url_to_dict

    parsed = url_to_dict(channel.url, secure_logging=True)
    if not parsed:
        raise Unprocessable(f"url is not a valid {channel.service} URL: Apprise cannot read it.")
    return _instantiate(apprise, parsed, channel.service)


def redact(url: str, *, host: bool = False) -> str:
    """`url` as its owner wrote it, with every part that may hold a token masked: the
    userinfo (`****`: a password gives away no letter), every path segment, every query
    value (a bare query word too); with `host`, the host and port (where a hosted
    service's URL holds its token, or ntfy.sh's first topic). The scheme, a host of the
    owner's choosing and the query's names stay readable, and nothing the owner did not
    write is added. A masked part of 12 characters or more keeps its first and last (`a...z`,
    as Apprise shows tokens), so that its owner can tell one from another; a shorter one
    is `****`."""
    scheme, _, rest = url.strip().partition("://")
    rest, question, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    userinfo = ":".join("****" if part else "" for part in userinfo.split(":"))
    if host:
        hostport = _masked(hostport)
    path = "/".join(_masked(segment) for segment in path.split("/"))
    pairs = (pair.partition("=") for pair in query.split("&"))
    query = "&".join(f"{key}={_masked(value)}" if eq else _masked(key) for key, eq, value in pairs)
    return f"{scheme}://{userinfo}{at}{hostport}{slash}{path}{question}{query}"


@webhooks.once
def apprise_module() -> ModuleType:
    """Apprise, loaded on first use with its plugins. Raises ModuleNotFoundError when it
    is not installed (`pip install 'headway[server]'`).

    Loading cuts Apprise's logger off from the application's: its messages hold URLs and
    tokens (`Loaded ... URL: ...`, a plugin's "invalid token (...)" warnings), so the
    `apprise` logger keeps them to itself (no propagation, a level above CRITICAL, a
    NullHandler). What a send did is reported by `send.SendOutcome` instead.
    """
    logger = logging.getLogger("apprise")
    logger.propagate = False
    logger.setLevel(logging.CRITICAL + 10)
    logger.handlers[:] = [logging.NullHandler()]
    with warnings.catch_warnings():
        # Apprise's e-mail plugin imports `imghdr`, deprecated in Python 3.11.
        warnings.simplefilter("ignore", DeprecationWarning)
        import apprise
        from apprise.plugins import N_MGR

        N_MGR.load_modules()
    return apprise


def _refuse_never(scheme: str) -> None:
    if scheme in NEVER_SCHEMES:
        raise Unprocessable(
            f"url's scheme {scheme}:// is never allowed: channels do not write local files, "
            "show desktop notifications, use D-Bus, write system logs or run scripts."
        )


def _instantiate(apprise: ModuleType, parsed: dict[str, Any], service: str) -> Any:
    asset = apprise.AppriseAsset(
        storage_mode="memory",  # nothing written to disk
        http_redirects=False,  # a redirect could lead anywhere; no service needs one
        secure_logging=True,
        app_id="Headway",
        app_desc="Headway",
    )
    try:
        plugin = apprise.Apprise.instantiate(dict(parsed), asset=asset, suppress_exceptions=False)
    except Exception:  # Apprise's messages quote the tokens: say it in our words
        plugin = False
    if plugin is False:
        raise Unprocessable(
            f"url is not a valid {service} URL: Apprise refuses its parts "
            "(check its tokens, addresses and options)."
        )
    if plugin is None:
        raise Unprocessable(f"url's service {service} cannot send from this server.")
    return plugin


def _targets(scheme: str, plugin: Any) -> list[tuple[str, int]]:
    """The (host, port) pairs of the owner's choosing `plugin` connects to."""
    if scheme in _HOSTED:
        return []
    if scheme in ("mailto", "mailtos"):
        return [(plugin.smtp_host, int(plugin.port))]
    if scheme == "zulip":
        if plugin.hostname == plugin.default_hostname:
            return []  # <organization>.zulipchat.com
        return [(f"{plugin.organization}.{plugin.hostname}", 443)]
    if scheme in ("ntfy", "ntfys") and plugin.mode != "private":
        return []  # ntfy.sh
    if scheme in ("matrix", "matrixs") and plugin.mode == "t2bot":
        return []  # webhooks.t2bot.io
    if not plugin.host or (scheme not in _USER_HOST and not getattr(plugin, "protocol", None)):
        return []
    secure = plugin.secure or scheme in _ALWAYS_HTTPS
    port = plugin.port if isinstance(plugin.port, int) else (443 if secure else 80)
    return [(plugin.host, port)]


def _checked_target(host: str, port: int) -> Target:
    """The target in the form the name lookups see, or Unprocessable if `host` is not a
    valid host name or address (the webhooks' syntax check)."""
    url = webhooks.check_url_syntax(f"https://{_bracketed(host.strip('[]'))}:{port}/")
    return Target(url.raw_host.decode("ascii").lower(), url.port or port)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _masked(part: str) -> str:
    if not part:
        return part
    return f"{part[0]}...{part[-1]}" if len(part) >= 12 else "****"

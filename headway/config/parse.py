"""How each `HEADWAY_` variable's text is read: whole numbers, booleans, networks, rates,
sizes, shares, seconds, durations, host patterns and channel schemes. Each reader returns
the typed value (the default when unset) or raises ConfigError naming the variable."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..notify.schemes import parse_schemes


class ConfigError(ValueError):
    """A setting has a value Headway cannot use; the message names the variable."""


@dataclass(frozen=True, slots=True)
class FreeMin:
    """HEADWAY_DISK_FREE_MIN: the free space a filesystem must keep, as bytes, as a share
    of the filesystem, or (the default) the smaller of both. 0 bytes: no minimum."""

    bytes: int | None = 1024**3
    share: float | None = 0.05

    def of(self, disk_bytes: int) -> int:
        """The minimum in bytes on a filesystem of `disk_bytes`."""
        found = [] if self.bytes is None else [self.bytes]
        if self.share is not None:
            found.append(int(disk_bytes * self.share))
        return min(found)

    def __str__(self) -> str:
        share = None if self.share is None else f"{self.share * 100:g}%"
        if self.bytes is None:
            return f"{share} of the disk"
        if share is None:
            return size_text(self.bytes)
        return f"{size_text(self.bytes)} or {share} of the disk, whichever is smaller"

    def validate(self) -> None:
        if self.bytes is None and self.share is None:
            raise ConfigError("HEADWAY_DISK_FREE_MIN needs a size or a percentage")
        if (self.bytes is not None and self.bytes < 0) or (
            self.share is not None and not 0 <= self.share <= 1
        ):
            raise ConfigError(
                "HEADWAY_DISK_FREE_MIN must be a size (1GiB) or a percentage from 0% to 100%"
            )


def _int(
    env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int | None = None
) -> int:
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or raw == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"HEADWAY_{name} must be a whole number, not {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise ConfigError(f"HEADWAY_{name} must be {bounds}, not {value}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ConfigError(f"HEADWAY_{name} must be true or false, not {raw!r}")


def _allow_private(env: Mapping[str, str]) -> bool:
    """HEADWAY_ALLOW_PRIVATE_TARGETS, or its older name HEADWAY_WEBHOOK_ALLOW_PRIVATE (it
    governs channels too): either alone decides; both set must agree, since which one an
    operator meant cannot be known, and a guess could open the network to every URL."""
    new = _bool(env, "ALLOW_PRIVATE_TARGETS", False)
    old = _bool(env, "WEBHOOK_ALLOW_PRIVATE", False)
    both = env.get("HEADWAY_ALLOW_PRIVATE_TARGETS") and env.get("HEADWAY_WEBHOOK_ALLOW_PRIVATE")
    if both and new != old:
        raise ConfigError(
            "HEADWAY_ALLOW_PRIVATE_TARGETS and HEADWAY_WEBHOOK_ALLOW_PRIVATE (its older name) "
            "disagree: set one of them"
        )
    return new or old


def _networks(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated list of addresses or networks (`10.0.0.0/8`, `::1`)."""
    raw = env.get(f"HEADWAY_{name}") or ""
    found = tuple(part.strip() for part in raw.split(",") if part.strip())
    for part in found:
        try:
            _network(part)
        except ConfigError:
            raise ConfigError(
                f"HEADWAY_{name} holds addresses or networks such as 10.0.0.0/8, not {part!r}"
            ) from None
    return found


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ConfigError(f"{text!r} is not an address or network") from None


def _rate(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(f"HEADWAY_{name}")
    return default if raw is None or not raw.strip() else raw.strip()


_RATE = re.compile(r"\s*[0-9]+\s*(/|per)\s*([0-9]+\s*)?(second|minute|hour|day)s?\s*", re.I)


def _check_rate(name: str, value: str) -> None:
    for part in value.split(";"):
        if not _RATE.fullmatch(part):
            raise ConfigError(f"{name} holds limits such as 600/second;6000/minute, not {value!r}")


_SIZE = re.compile(r"\s*([0-9]+)\s*(|B|KiB|MiB|GiB|K|M|G)\s*", re.I)
_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2}
_UNITS.update({"g": 1024**3, "gib": 1024**3})


def _size(env: Mapping[str, str], name: str) -> int | None:
    """A size in bytes, with an optional KiB/MiB/GiB unit; unset gives None."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return None
    match = _SIZE.fullmatch(raw)
    if match is None:
        raise ConfigError(f"HEADWAY_{name} must be a size such as 512MiB, not {raw!r}")
    return int(match[1]) * _UNITS[match[2].lower()]


def size_text(size: int) -> str:
    """`size` bytes as people read it: `512 B`, `20 KiB`, `1.5 GiB`."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} B"


_PERCENT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*")


def _free_min(env: Mapping[str, str], name: str) -> FreeMin | None:
    """A size (`2GiB`, bytes) or a percentage of the disk (`5%`); unset gives None."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return None
    match = _PERCENT.fullmatch(raw)
    if match is not None and float(match[1]) <= 100:
        return FreeMin(bytes=None, share=float(match[1]) / 100)
    if match is None and _SIZE.fullmatch(raw):
        return FreeMin(bytes=_size(env, name), share=None)
    raise ConfigError(
        f"HEADWAY_{name} must be a size such as 1GiB or a percentage such as 5%, not {raw!r}"
    )


def _float(
    env: Mapping[str, str], name: str, default: float, *, high: float, inclusive: bool, what: str
) -> float:
    """A number above 0 and below `high` (or at most `high`, if `inclusive`)."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 < value <= high if inclusive else 0 < value < high):
        raise ConfigError(f"HEADWAY_{name} must be {what}, not {raw!r}")
    return value


def _fraction(env: Mapping[str, str], name: str, default: float) -> float:
    return _float(env, name, default, high=1, inclusive=True, what="a number above 0, at most 1")


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    return _float(
        env, name, default, high=86_400, inclusive=False, what="a number of seconds above 0"
    )


def _optional_port(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return None
    return _int(env, name, 0, minimum=1, maximum=65535)


def _host_patterns(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """A comma-separated list of `host[:port]` patterns; unset or empty gives None."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return None
    patterns = tuple(part.strip() for part in raw.split(",") if part.strip())
    return patterns or None


def _check_host_patterns(patterns: tuple[str, ...]) -> None:
    """Each pattern is what a Host header holds: `name`, `name:port` or `name:*` (any
    port), with IPv6 addresses in brackets; `*` alone turns the check off."""
    name = "HEADWAY_MCP_ALLOWED_HOSTS"
    if "*" in patterns and len(patterns) > 1:
        raise ConfigError(f"{name}: * turns the Host check off and cannot be combined with hosts")
    for pattern in patterns:
        match = _HOST_PATTERN.fullmatch(pattern)
        port = match and match["port"]
        if pattern != "*" and (match is None or (port and port != "*" and int(port) > 65535)):
            raise ConfigError(
                f"{name} holds host[:port] patterns such as api.example.com or "
                f"api.example.com:* (any port), not {pattern!r}"
            )


_HOST_PATTERN = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:(?P<port>\*|[0-9]{1,5}))?")


def _schemes(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """A comma-separated list of Apprise schemes (`ntfy,tgram,mailtos`); unset gives None.
    Schemes never allowed for channels (files, desktops, scripts) are refused here."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return None
    try:
        return tuple(sorted(parse_schemes(raw)))
    except ValueError as exc:
        raise ConfigError(f"HEADWAY_{name}: {exc}") from None


LIVE_SERVICES = ("ntfy", "telegram", "discord", "slack", "matrix")


def _endpoints(env: Mapping[str, str], name: str) -> tuple[tuple[str, str], ...]:
    """`service=base URL` pairs, comma-separated (`telegram=http://127.0.0.1:8081`): the
    services of live messages, each at most once, each URL http(s) with a host."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return ()
    found: dict[str, str] = {}
    for part in raw.split(","):
        service, eq, url = (piece.strip() for piece in part.partition("="))
        if not eq or service.lower() not in LIVE_SERVICES:
            raise ConfigError(
                f"HEADWAY_{name}: each entry is service=URL, the service one of "
                f"{', '.join(LIVE_SERVICES)}"
            )
        if service.lower() in found:
            raise ConfigError(f"HEADWAY_{name}: {service} is named twice")
        scheme, sep, rest = url.partition("://")
        if scheme.lower() not in ("http", "https") or not sep or not rest.strip("/"):
            raise ConfigError(f"HEADWAY_{name}: {service}'s URL must be http(s)://host[:port]")
        found[service.lower()] = url.rstrip("/")
    return tuple(sorted(found.items()))


_DURATION = re.compile(r"\s*(\d+)\s*(s|m|h|d|w)?\s*", re.IGNORECASE)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def _retention(env: Mapping[str, str], name: str, default: int | None) -> int | None:
    """A duration (`90d`, `12h`, `3600` seconds...) of at least an hour, or `never`."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return default
    if raw.strip().lower() == "never":
        return None
    match = _DURATION.fullmatch(raw)
    if match is None:
        raise ConfigError(f"HEADWAY_{name} must be a duration such as 90d or 12h, or never")
    seconds = int(match[1]) * _DURATION_UNITS[(match[2] or "s").lower()]
    if seconds < 3600:
        raise ConfigError(f"HEADWAY_{name} must be at least 1h (activity is known to the hour)")
    return seconds


def _give_up(env: Mapping[str, str], name: str, default: int) -> int:
    """A duration (`24h`, `90m`, `3600` seconds...) of at least a minute."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return default
    match = _DURATION.fullmatch(raw)
    seconds = 0 if match is None else int(match[1]) * _DURATION_UNITS[(match[2] or "s").lower()]
    if seconds < 60:
        raise ConfigError(f"HEADWAY_{name} must be a duration of at least 1m, such as 24h or 90m")
    return seconds

"""Typed settings from `HEADWAY_` environment variables, checked once at start."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

# The longest wait between two looks for stalls: a stall is told within its channel's
# `stalled_after` + 30 s (one look's wait, and the look itself).
MAX_STALL_SCAN = 30


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


# The kinds of request rated per client address, each by its `rate_<kind>` setting.
RATED = ("spaces", "tasks", "webhooks", "shares", "channels", "reports", "creates", "reads")


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable. The defaults are the embedded default."""

    database_url: str = "sqlite:///./headway.db"
    redis_url: str | None = None
    progress_ttl: int = 86_400
    host: str = "127.0.0.1"
    port: int = 8000
    webhook_allow_private: bool = False
    run_worker: bool = True
    # Host header patterns `/mcp` answers (DNS-rebinding protection). None: derived from
    # `host` (see `api.mcp_tools.transport_security`); ("*",): no check.
    mcp_allowed_hosts: tuple[str, ...] | None = None
    # --- Abuse limits (see `headway.limits` and the README's "Limits and abuse") ---------------
    # Addresses whose X-Forwarded-For is believed (networks, e.g. 10.0.0.0/8).
    trusted_proxies: tuple[str, ...] = ()
    # False turns every rate limit off; budgets and sizes stay on.
    rate_limits: bool = True
    # Per client address, in the `limits` notation ("600/second;6000/minute").
    rate_spaces: str = "600/second;6000/minute"
    rate_tasks: str = "600/second;6000/minute"
    rate_webhooks: str = "30/second;300/minute"
    rate_shares: str = "30/second;300/minute"
    rate_channels: str = "10/second;60/minute"
    rate_reports: str = "20000/second"
    # Tasks rendered by reads (see the README's limits table for why this default).
    rate_reads: str = "300000/minute"
    # Creates of every kind (spaces, tasks, webhooks, shares, channels) per client address.
    rate_creates: str = "100000/day"
    # Bytes of live progress this process may hold (memory store only). None: sized from
    # the machine at start (an eighth of its memory, at most 512 MiB).
    progress_memory: int | None = None
    # The share of that budget one space may hold.
    progress_memory_per_space: float = 0.125
    webhooks_per_space: int = 20
    # --- What is kept (see the README's "Data and retention") ------------------------------
    # Seconds a space may go without a create, report or read before it is deleted (None:
    # never).
    space_retention: int | None = 90 * 86_400
    # Seconds between two steps of the sweeper (retention).
    sweep_every: float = 60.0
    children_per_parent: int = 10_000
    tasks_per_space: int = 100_000
    shares_per_space: int = 100
    # --- Notification channels (see `headway.notify`) ------------------------------------
    channels_per_space: int = 20
    # Apprise schemes a channel may use (None: `notify.urls.DEFAULT_SCHEMES`).
    channel_schemes: tuple[str, ...] | None = None
    # Messages one channel may send per hour, in the `limits` notation (N/hour).
    channel_messages: str = "60/hour"
    # The service's public base URL, for read-only links in messages (None: no links).
    public_url: str | None = None
    # Seconds between two looks for stalled tasks (`notify.stalls`). At most 30: the
    # contract tells a stall within `stalled_after` + 30 s.
    stall_scan: int = 15
    # Live streams (`GET /spaces/{s}/events`) open at once in this process, and per client
    # address (the latter is a rate limit: off with `rate_limits`).
    max_streams: int = 2000
    streams_per_client: int = 256
    # HTTP server protections (`headway serve`).
    max_connections: int = 4096
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # `GET /metrics`: on the service's port (True), off (False), or only on `metrics_port`.
    metrics: bool = True
    metrics_port: int | None = None
    # --- Disk (see `headway.disk`) -------------------------------------------------------
    # The database's size on disk past which creates are refused (None: no limit).
    database_max_size: int | None = None
    # Free space the database's filesystem must keep for creates to pass.
    disk_free_min: FreeMin = FreeMin()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every `HEADWAY_` variable; unknown values raise ConfigError."""
        env = os.environ if environ is None else environ
        defaults = cls()

        def text(name: str, default: str | None) -> str | None:
            value = env.get(f"HEADWAY_{name}")
            return default if value is None or value == "" else value

        settings = cls(
            database_url=text("DATABASE_URL", defaults.database_url) or defaults.database_url,
            redis_url=text("REDIS_URL", None),
            progress_ttl=_int(env, "PROGRESS_TTL", defaults.progress_ttl, minimum=1),
            host=text("HOST", defaults.host) or defaults.host,
            port=_int(env, "PORT", defaults.port, minimum=0, maximum=65535),
            webhook_allow_private=_bool(
                env, "WEBHOOK_ALLOW_PRIVATE", defaults.webhook_allow_private
            ),
            run_worker=_bool(env, "RUN_WORKER", defaults.run_worker),
            mcp_allowed_hosts=_host_patterns(env, "MCP_ALLOWED_HOSTS"),
            trusted_proxies=_networks(env, "TRUSTED_PROXIES"),
            rate_limits=_bool(env, "RATE_LIMITS", defaults.rate_limits),
            rate_spaces=_rate(env, "RATE_SPACES", defaults.rate_spaces),
            rate_tasks=_rate(env, "RATE_TASKS", defaults.rate_tasks),
            rate_webhooks=_rate(env, "RATE_WEBHOOKS", defaults.rate_webhooks),
            rate_shares=_rate(env, "RATE_SHARES", defaults.rate_shares),
            rate_channels=_rate(env, "RATE_CHANNELS", defaults.rate_channels),
            rate_reports=_rate(env, "RATE_REPORTS", defaults.rate_reports),
            rate_reads=_rate(env, "RATE_READS", defaults.rate_reads),
            rate_creates=_rate(env, "RATE_CREATES", defaults.rate_creates),
            space_retention=_retention(env, "SPACE_RETENTION", defaults.space_retention),
            sweep_every=_float(
                env,
                "SWEEP_EVERY",
                defaults.sweep_every,
                high=3600,
                inclusive=True,
                what="a number of seconds above 0, at most 3600",
            ),
            children_per_parent=_int(
                env, "CHILDREN_PER_PARENT", defaults.children_per_parent, minimum=1
            ),
            tasks_per_space=_int(env, "TASKS_PER_SPACE", defaults.tasks_per_space, minimum=1),
            progress_memory=_size(env, "PROGRESS_MEMORY"),
            progress_memory_per_space=_fraction(
                env, "PROGRESS_MEMORY_PER_SPACE", defaults.progress_memory_per_space
            ),
            webhooks_per_space=_int(
                env, "WEBHOOKS_PER_SPACE", defaults.webhooks_per_space, minimum=1
            ),
            shares_per_space=_int(env, "SHARES_PER_SPACE", defaults.shares_per_space, minimum=1),
            channels_per_space=_int(
                env, "CHANNELS_PER_SPACE", defaults.channels_per_space, minimum=1
            ),
            channel_schemes=_schemes(env, "CHANNEL_SCHEMES"),
            channel_messages=text("CHANNEL_MESSAGES", defaults.channel_messages)
            or defaults.channel_messages,
            public_url=text("PUBLIC_URL", None),
            stall_scan=_int(
                env, "STALL_SCAN", defaults.stall_scan, minimum=1, maximum=MAX_STALL_SCAN
            ),
            max_streams=_int(env, "MAX_STREAMS", defaults.max_streams, minimum=1),
            streams_per_client=_int(
                env, "STREAMS_PER_CLIENT", defaults.streams_per_client, minimum=1
            ),
            max_connections=_int(env, "MAX_CONNECTIONS", defaults.max_connections, minimum=1),
            header_timeout=_seconds(env, "HEADER_TIMEOUT", defaults.header_timeout),
            body_timeout=_seconds(env, "BODY_TIMEOUT", defaults.body_timeout),
            metrics=_bool(env, "METRICS", defaults.metrics),
            metrics_port=_optional_port(env, "METRICS_PORT"),
            database_max_size=_size(env, "DATABASE_MAX_SIZE"),
            disk_free_min=_free_min(env, "DISK_FREE_MIN") or defaults.disk_free_min,
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ConfigError if the settings cannot work together."""
        scheme = self.database_url.split(":", 1)[0].split("+", 1)[0]
        if scheme not in ("sqlite", "postgresql", "postgres"):
            raise ConfigError(
                f"HEADWAY_DATABASE_URL must start with sqlite:/// or postgresql://, not {scheme}:"
            )
        if scheme == "sqlite":
            try:
                sqlite_file(self.database_url)
            except ValueError as exc:
                raise ConfigError(f"HEADWAY_DATABASE_URL: {exc}") from None
        if self.redis_url is not None and not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ConfigError("HEADWAY_REDIS_URL must start with redis://, rediss:// or unix://")
        if self.progress_ttl < 1:
            raise ConfigError("HEADWAY_PROGRESS_TTL must be a whole number of seconds, at least 1")
        if self.mcp_allowed_hosts is not None:
            _check_host_patterns(self.mcp_allowed_hosts)
        for proxy in self.trusted_proxies:
            _network(proxy)
        for name in RATED:
            _check_rate(f"HEADWAY_RATE_{name.upper()}", getattr(self, f"rate_{name}"))
        if self.progress_memory is not None and self.progress_memory < 1024 * 1024:
            raise ConfigError("HEADWAY_PROGRESS_MEMORY must be at least 1MiB")
        self.channel_messages_per_hour  # noqa: B018  (raises ConfigError if malformed)
        if self.public_url is not None and not re.fullmatch(
            r"https?://[^\s/?#]+(/[^\s?#]*)?", self.public_url
        ):
            raise ConfigError(
                "HEADWAY_PUBLIC_URL must be an absolute http(s) URL such as "
                "https://progress.example.com"
            )
        if not 1 <= self.stall_scan <= MAX_STALL_SCAN:
            raise ConfigError(
                f"HEADWAY_STALL_SCAN must be from 1 to {MAX_STALL_SCAN}, not {self.stall_scan}"
            )
        if not 0 < self.progress_memory_per_space <= 1:
            raise ConfigError("HEADWAY_PROGRESS_MEMORY_PER_SPACE must be above 0 and at most 1")
        if self.database_max_size is not None and self.database_max_size < 1:
            raise ConfigError("HEADWAY_DATABASE_MAX_SIZE must be a size above 0, such as 10GiB")
        self.disk_free_min.validate()

    @property
    def channel_messages_per_hour(self) -> int:
        """HEADWAY_CHANNEL_MESSAGES as a count per hour ("60/hour", "1/minute" = 60)."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(minute|hour|day)\s*", self.channel_messages)
        if match is None or int(match[1]) < 1:
            raise ConfigError(
                "HEADWAY_CHANNEL_MESSAGES must be N/hour (or N/minute, N/day), N at least 1, "
                f"not {self.channel_messages!r}"
            )
        count = int(match[1])
        return {"minute": count * 60, "hour": count, "day": max(1, count // 24)}[match[2]]

    @property
    def progress_memory_budget(self) -> int:
        """Bytes of live progress the memory store may hold: the setting, or sized from
        the machine (an eighth of its physical memory, at most 512 MiB)."""
        if self.progress_memory is not None:
            return self.progress_memory
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError):
            physical = 4 * 1024**3
        return max(min(physical // 8, 512 * 1024**2), 16 * 1024**2)

    def with_(self, **changes: object) -> Settings:
        """A copy with some settings changed, validated."""
        settings = replace(self, **changes)  # type: ignore[arg-type]
        settings.validate()
        return settings

    @property
    def shares_progress(self) -> bool:
        """True when progress lives outside this process, so several processes may serve."""
        return self.redis_url is not None


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


def sqlite_file(url: str) -> str:
    """The file a SQLite URL names; ValueError if it names none (`:memory:`, no path):
    Headway's connections to it (pooled, the writer's, the event loop's reader) must all
    open the same database."""
    path = url.split(":///", 1)[1] if ":///" in url else ""
    path = path.split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        raise ValueError("a SQLite database must be a file, as in sqlite:///path/to/headway.db")
    return os.path.expanduser(path)


def _schemes(env: Mapping[str, str], name: str) -> tuple[str, ...] | None:
    """A comma-separated list of Apprise schemes (`ntfy,tgram,mailtos`); unset gives None.
    Schemes never allowed for channels (files, desktops, scripts) are refused here."""
    raw = env.get(f"HEADWAY_{name}")
    if raw is None or not raw.strip():
        return None
    from .notify.urls import parse_schemes

    try:
        return tuple(sorted(parse_schemes(raw)))
    except ValueError as exc:
        raise ConfigError(f"HEADWAY_{name}: {exc}") from None


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

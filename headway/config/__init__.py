"""Typed settings from `HEADWAY_` environment variables, checked once at start."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .parse import (
    ConfigError,
    FreeMin,
    _allow_private,
    _bool,
    _check_host_patterns,
    _check_rate,
    _endpoints,
    _float,
    _fraction,
    _free_min,
    _give_up,
    _host_patterns,
    _int,
    _network,
    _networks,
    _optional_port,
    _rate,
    _retention,
    _schemes,
    _seconds,
    _size,
)

# The longest wait between two looks for stalls: a stall is told within its channel's
# `stalled_after` + 30 s (one look's wait, and the look itself).
MAX_STALL_SCAN = 30


# The kinds of request rated per client address, each by its `rate_<kind>` setting.
RATED = (
    "spaces",
    "tasks",
    "webhooks",
    "shares",
    "channels",
    "reports",
    "creates",
    "reads",
    "wheels",
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable. The defaults are the embedded default."""

    database_url: str = "sqlite:///./headway.db"
    redis_url: str | None = None
    progress_ttl: int = 86_400
    host: str = "127.0.0.1"
    port: int = 8000
    # Webhooks and channels may reach non-public addresses: HEADWAY_ALLOW_PRIVATE_TARGETS,
    # or its older name HEADWAY_WEBHOOK_ALLOW_PRIVATE.
    webhook_allow_private: bool = False
    run_worker: bool = True
    # Host header patterns `/mcp` answers (DNS-rebinding protection). None: derived from
    # `host` (see `api.mcp_tools.transport_security`); ("*",): no check.
    mcp_allowed_hosts: tuple[str, ...] | None = None
    # --- Abuse limits (see `headway.api.limits` and docs/limits.md) -----------------------------
    # Addresses whose X-Forwarded-For, Forwarded, X-Real-IP are believed (10.0.0.0/8).
    trusted_proxies: tuple[str, ...] = ()
    # False turns every rate limit off; budgets and sizes stay on.
    rate_limits: bool = True
    # One log line per request (headway.ops.logs); off, the app has no access log to skip.
    access_log: bool = False
    # Keep each live task's track of reports beside its progress, for estimates of its
    # time left (off: estimates from its job's usual duration only).
    estimates: bool = True
    # Per client address, in the `limits` notation ("600/second;6000/minute").
    rate_spaces: str = "600/second;6000/minute"
    rate_tasks: str = "600/second;6000/minute"
    rate_webhooks: str = "30/second;300/minute"
    rate_shares: str = "30/second;300/minute"
    rate_channels: str = "10/second;60/minute"
    rate_reports: str = "20000/second"
    # Tasks rendered by reads (see docs/limits.md for why this default).
    rate_reads: str = "300000/minute"
    # Creates of every kind (spaces, tasks, webhooks, shares, channels) per client address.
    rate_creates: str = "100000/day"
    # Downloads of the client wheel (`GET /client/<wheel>`, 428 KB each).
    rate_wheels: str = "10/second;120/minute"
    # Bytes of live progress this process (with Redis: all instances) may hold. None: sized
    # from the machine at start (an eighth of its memory, at most 512 MiB).
    progress_memory: int | None = None
    # Shares of it one space, and one client address (an IPv6 /64) over all spaces, may hold.
    progress_memory_per_space: float = 0.125
    progress_memory_per_client: float = 0.25
    webhooks_per_space: int = 20
    # Undelivered events one endpoint (a webhook, a channel) holds; beyond, the oldest is
    # given up. And seconds after its creation an undelivered event is given up.
    outbox_per_endpoint: int = 10_000
    delivery_give_up: int = 86_400
    # --- What is kept (see docs/retention.md) -------------------------------------------------
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
    # Apprise schemes a channel may use (None: `notify.schemes.DEFAULT_SCHEMES`).
    channel_schemes: tuple[str, ...] | None = None
    # Messages one channel may send per hour, in the `limits` notation (N/hour).
    channel_messages: str = "60/hour"
    # The service's public base URL, for read-only links in messages (None: no links).
    public_url: str | None = None
    # Live messages (`notify.live`): seconds between two edits of one message (and one
    # at each change of state), live messages one channel keeps at once, and base URLs
    # that replace a service's own ("telegram=http://127.0.0.1:8081,..."): a local Bot
    # API server, a gateway.
    live_edit_interval: int = 15
    live_messages: int = 20
    live_endpoints: tuple[tuple[str, str], ...] = ()
    # Seconds between two looks for stalled tasks (`notify.stalls`). At most 30: the
    # contract tells a stall within `stalled_after` + 30 s.
    stall_scan: int = 15
    # Live streams open at once in this process, per client address and per network (an
    # IPv6 /48; the last two are rate limits: off with `rate_limits`).
    max_streams: int = 2000
    streams_per_client: int = 256
    streams_per_network: int = 512
    # HTTP server protections (`headway serve`).
    max_connections: int = 4096
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    # `GET /metrics`: on the service's port (True), off (False), or only on `metrics_port`.
    metrics: bool = True
    metrics_port: int | None = None
    # --- Disk (see `headway.ops.disk`) -------------------------------------------------------
    # The database's size on disk past which creates are refused (None: no limit).
    database_max_size: int | None = None
    # Free space the database's filesystem must keep for creates to pass.
    disk_free_min: FreeMin = field(default_factory=FreeMin)

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
            webhook_allow_private=_allow_private(env),
            run_worker=_bool(env, "RUN_WORKER", defaults.run_worker),
            mcp_allowed_hosts=_host_patterns(env, "MCP_ALLOWED_HOSTS"),
            trusted_proxies=_networks(env, "TRUSTED_PROXIES"),
            rate_limits=_bool(env, "RATE_LIMITS", defaults.rate_limits),
            access_log=_bool(env, "ACCESS_LOG", defaults.access_log),
            estimates=_bool(env, "ESTIMATES", defaults.estimates),
            **{
                f"rate_{kind}": _rate(
                    env, f"RATE_{kind.upper()}", getattr(defaults, f"rate_{kind}")
                )
                for kind in RATED
            },
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
            progress_memory_per_client=_fraction(
                env, "PROGRESS_MEMORY_PER_CLIENT", defaults.progress_memory_per_client
            ),
            webhooks_per_space=_int(
                env, "WEBHOOKS_PER_SPACE", defaults.webhooks_per_space, minimum=1
            ),
            outbox_per_endpoint=_int(
                env, "OUTBOX_PER_ENDPOINT", defaults.outbox_per_endpoint, minimum=1
            ),
            delivery_give_up=_give_up(env, "DELIVERY_GIVE_UP", defaults.delivery_give_up),
            shares_per_space=_int(env, "SHARES_PER_SPACE", defaults.shares_per_space, minimum=1),
            channels_per_space=_int(
                env, "CHANNELS_PER_SPACE", defaults.channels_per_space, minimum=1
            ),
            channel_schemes=_schemes(env, "CHANNEL_SCHEMES"),
            channel_messages=text("CHANNEL_MESSAGES", defaults.channel_messages)
            or defaults.channel_messages,
            public_url=text("PUBLIC_URL", None),
            live_edit_interval=_int(
                env, "LIVE_EDIT_INTERVAL", defaults.live_edit_interval, minimum=1, maximum=3600
            ),
            live_messages=_int(env, "LIVE_MESSAGES", defaults.live_messages, minimum=0),
            live_endpoints=_endpoints(env, "LIVE_ENDPOINTS"),
            stall_scan=_int(
                env, "STALL_SCAN", defaults.stall_scan, minimum=1, maximum=MAX_STALL_SCAN
            ),
            max_streams=_int(env, "MAX_STREAMS", defaults.max_streams, minimum=1),
            streams_per_client=_int(
                env, "STREAMS_PER_CLIENT", defaults.streams_per_client, minimum=1
            ),
            streams_per_network=_int(
                env, "STREAMS_PER_NETWORK", defaults.streams_per_network, minimum=1
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
        for share in ("space", "client"):
            if not 0 < getattr(self, f"progress_memory_per_{share}") <= 1:
                raise ConfigError(
                    f"HEADWAY_PROGRESS_MEMORY_PER_{share.upper()} must be above 0 and at most 1"
                )
        if self.outbox_per_endpoint < 1:
            raise ConfigError("HEADWAY_OUTBOX_PER_ENDPOINT must be a whole number, at least 1")
        if self.delivery_give_up < 60:
            raise ConfigError("HEADWAY_DELIVERY_GIVE_UP must be a duration of at least 1m")
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
        """Bytes of live progress the store may hold (with Redis too): the setting, or
        sized from the machine (an eighth of its physical memory, at most 512 MiB)."""
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
    def several_instances(self) -> bool:
        """True when progress lives outside this process (Redis), so several instances may
        serve."""
        return self.redis_url is not None


def sqlite_file(url: str) -> str:
    """The file a SQLite URL names; ValueError if it names none (`:memory:`, no path):
    Headway's connections to it (pooled, the writer's, the event loop's reader) must all
    open the same database."""
    path = url.split(":///", 1)[1] if ":///" in url else ""
    path = path.split("?", 1)[0]
    if not path or path == ":memory:" or path.startswith("file::memory:"):
        raise ValueError("a SQLite database must be a file, as in sqlite:///path/to/headway.db")
    return os.path.expanduser(path)

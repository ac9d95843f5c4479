"""Typed settings from `HEADWAY_` environment variables, checked once at start."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace


class ConfigError(ValueError):
    """A setting has a value Headway cannot use; the message names the variable."""


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
    # `host` (see `api.mcp.transport_security`); ("*",): no check.
    mcp_allowed_hosts: tuple[str, ...] | None = None

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
        if self.redis_url is not None and not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ConfigError("HEADWAY_REDIS_URL must start with redis://, rediss:// or unix://")
        if self.progress_ttl < 1:
            raise ConfigError("HEADWAY_PROGRESS_TTL must be a whole number of seconds, at least 1")
        if self.mcp_allowed_hosts is not None:
            _check_host_patterns(self.mcp_allowed_hosts)

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

"""Settings from HEADWAY_ variables, checked at start, and the `headway` command's refusals."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from headway import cli
from headway.config import ConfigError, FreeMin, Settings

from . import docs


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The process environment without any HEADWAY_ variable."""
    for name in list(os.environ):
        if name.startswith("HEADWAY_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_defaults_with_nothing_set(bare_env):
    settings = Settings.from_env()
    assert settings.database_url == "sqlite:///./headway.db"
    assert settings.redis_url is None
    assert settings.progress_ttl == 86_400
    assert settings.host == "127.0.0.1"
    assert settings.port == 8000
    assert settings.webhook_allow_private is False
    assert settings.run_worker is True
    assert settings.several_instances is False


def test_defaults_with_empty_mapping_match_the_dataclass():
    assert Settings.from_env({}) == Settings()


def test_empty_variables_read_as_unset():
    env = {f"HEADWAY_{name}": "" for name in ("DATABASE_URL", "REDIS_URL", "PROGRESS_TTL", "PORT")}
    assert Settings.from_env(env) == Settings()


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("DATABASE_URL", "sqlite:////var/lib/headway/h.db", "database_url", None),
        ("DATABASE_URL", "postgresql://u:p@db:5432/headway", "database_url", None),
        ("DATABASE_URL", "postgres://db/headway", "database_url", None),
        ("REDIS_URL", "redis://localhost:6379/0", "redis_url", None),
        ("REDIS_URL", "rediss://cache:6380", "redis_url", None),
        ("PROGRESS_TTL", "3600", "progress_ttl", 3600),
        ("PROGRESS_TTL", " 1 ", "progress_ttl", 1),
        ("HOST", "0.0.0.0", "host", None),
        ("PORT", "9001", "port", 9001),
        ("WEBHOOK_ALLOW_PRIVATE", "true", "webhook_allow_private", True),
        ("WEBHOOK_ALLOW_PRIVATE", "FALSE", "webhook_allow_private", False),
        ("ALLOW_PRIVATE_TARGETS", "true", "webhook_allow_private", True),
        ("ALLOW_PRIVATE_TARGETS", "false", "webhook_allow_private", False),
        ("RUN_WORKER", "false", "run_worker", False),
        ("RUN_WORKER", "True", "run_worker", True),
        ("TRUSTED_PROXIES", "10.0.0.0/8, ::1", "trusted_proxies", ("10.0.0.0/8", "::1")),
        ("RATE_LIMITS", "false", "rate_limits", False),
        ("RATE_SPACES", "10/second;100/minute", "rate_spaces", None),
        ("RATE_REPORTS", "5 per 2 seconds", "rate_reports", None),
        ("RATE_READS", "100000/10 seconds;1000000/hour", "rate_reads", None),
        ("PROGRESS_MEMORY", "256MiB", "progress_memory", 256 * 1024**2),
        ("PROGRESS_MEMORY", "2000000", "progress_memory", 2_000_000),
        ("PROGRESS_MEMORY_PER_SPACE", "0.5", "progress_memory_per_space", 0.5),
        ("PROGRESS_MEMORY_PER_CLIENT", "1", "progress_memory_per_client", 1.0),
        ("STREAMS_PER_NETWORK", "64", "streams_per_network", 64),
        ("WEBHOOKS_PER_SPACE", "3", "webhooks_per_space", 3),
        ("OUTBOX_PER_ENDPOINT", "500", "outbox_per_endpoint", 500),
        ("DELIVERY_GIVE_UP", "24h", "delivery_give_up", 86_400),
        ("DELIVERY_GIVE_UP", "90m", "delivery_give_up", 5400),
        ("DELIVERY_GIVE_UP", "2d", "delivery_give_up", 172_800),
        ("DELIVERY_GIVE_UP", "600", "delivery_give_up", 600),
        ("MAX_CONNECTIONS", "100", "max_connections", 100),
        ("HEADER_TIMEOUT", "2.5", "header_timeout", 2.5),
        ("BODY_TIMEOUT", "60", "body_timeout", 60.0),
        ("METRICS", "false", "metrics", False),
        ("METRICS_PORT", "9100", "metrics_port", 9100),
        ("STALL_SCAN", "1", "stall_scan", 1),
        ("STALL_SCAN", "30", "stall_scan", 30),
        ("DATABASE_MAX_SIZE", "10GiB", "database_max_size", 10 * 1024**3),
        ("DATABASE_MAX_SIZE", "500000", "database_max_size", 500_000),
        ("DISK_FREE_MIN", "2GiB", "disk_free_min", FreeMin(bytes=2 * 1024**3, share=None)),
        ("DISK_FREE_MIN", "5%", "disk_free_min", FreeMin(bytes=None, share=0.05)),
        ("DISK_FREE_MIN", " 0.5 % ", "disk_free_min", FreeMin(bytes=None, share=0.005)),
        ("DISK_FREE_MIN", "0", "disk_free_min", FreeMin(bytes=0, share=None)),
    ],
)
def test_each_variable_is_parsed(variable, value, field, expected):
    settings = Settings.from_env({f"HEADWAY_{variable}": value})
    assert getattr(settings, field) == (value if expected is None else expected)


def test_the_free_space_minimum_is_the_smaller_of_a_size_and_a_share_by_default():
    default = Settings().disk_free_min
    assert Settings().database_max_size is None
    assert default.of(10 * 1024**2) == 512 * 1024  # 5% of a 10 MiB disk
    assert default.of(1024**4) == 1024**3  # 1 GiB of a 1 TiB disk
    assert str(default) == "1 GiB or 5% of the disk, whichever is smaller"
    assert FreeMin(bytes=0, share=None).of(1024**4) == 0


def test_redis_url_makes_progress_shared():
    assert Settings.from_env({"HEADWAY_REDIS_URL": "redis://localhost"}).several_instances


def test_from_env_reads_the_process_environment(bare_env):
    bare_env.setenv("HEADWAY_PROGRESS_TTL", "120")
    bare_env.setenv("HEADWAY_PORT", "8123")
    settings = Settings.from_env()
    assert settings.progress_ttl == 120
    assert settings.port == 8123


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PROGRESS_TTL", "0"),
        ("PROGRESS_TTL", "-5"),
        ("PROGRESS_TTL", "abc"),
        ("PROGRESS_TTL", "1.5"),
        ("PORT", "70000"),
        ("PORT", "eighty"),
        ("RUN_WORKER", "yes"),
        ("RUN_WORKER", "1"),
        ("WEBHOOK_ALLOW_PRIVATE", "on"),
        ("ALLOW_PRIVATE_TARGETS", "yes"),
        ("DATABASE_URL", "mysql://x"),
        ("DATABASE_URL", "headway.db"),
        ("DATABASE_URL", "sqlite:///:memory:"),
        ("DATABASE_URL", "sqlite://"),
        ("REDIS_URL", "http://localhost:6379"),
        ("TRUSTED_PROXIES", "10.0.0.0/33"),
        ("TRUSTED_PROXIES", "nginx"),
        ("RATE_TASKS", "fast"),
        ("RATE_TASKS", "10/fortnight"),
        ("PROGRESS_MEMORY", "lots"),
        ("PROGRESS_MEMORY", "1KiB"),
        ("PROGRESS_MEMORY_PER_SPACE", "0"),
        ("PROGRESS_MEMORY_PER_SPACE", "1.5"),
        ("PROGRESS_MEMORY_PER_CLIENT", "0"),
        ("PROGRESS_MEMORY_PER_CLIENT", "a quarter"),
        ("STREAMS_PER_NETWORK", "0"),
        ("WEBHOOKS_PER_SPACE", "0"),
        ("OUTBOX_PER_ENDPOINT", "0"),
        ("OUTBOX_PER_ENDPOINT", "many"),
        ("DELIVERY_GIVE_UP", "30s"),
        ("DELIVERY_GIVE_UP", "never"),
        ("DELIVERY_GIVE_UP", "a day"),
        ("MAX_CONNECTIONS", "0"),
        ("HEADER_TIMEOUT", "0"),
        ("BODY_TIMEOUT", "never"),
        ("METRICS", "maybe"),
        ("METRICS_PORT", "70000"),
        ("STALL_SCAN", "0"),
        ("STALL_SCAN", "31"),
        ("STALL_SCAN", "2.5"),
        ("DATABASE_MAX_SIZE", "0"),
        ("DATABASE_MAX_SIZE", "big"),
        ("DISK_FREE_MIN", "101%"),
        ("DISK_FREE_MIN", "-1GiB"),
        ("DISK_FREE_MIN", "some"),
    ],
)
def test_bad_value_raises_config_error_naming_the_variable(variable, value):
    with pytest.raises(ConfigError, match=f"HEADWAY_{variable}"):
        Settings.from_env({f"HEADWAY_{variable}": value})


def test_settings_changed_in_code_are_validated_too():
    with pytest.raises(ConfigError, match="HEADWAY_PROGRESS_TTL"):
        Settings().with_(progress_ttl=0)
    with pytest.raises(ConfigError, match="HEADWAY_STALL_SCAN"):
        Settings().with_(stall_scan=31)
    with pytest.raises(ConfigError, match="HEADWAY_DELIVERY_GIVE_UP"):
        Settings().with_(delivery_give_up=59)
    with pytest.raises(ConfigError, match="HEADWAY_OUTBOX_PER_ENDPOINT"):
        Settings().with_(outbox_per_endpoint=0)


async def test_the_app_looks_for_stalls_as_often_as_configured(tmp_path):
    from headway.app import create_app

    from .conftest import running

    for scan, expected in ((None, 15), (2, 2)):
        settings = Settings(database_url=f"sqlite:///{tmp_path}/h{scan}.db", run_worker=False)
        if scan is not None:
            settings = settings.with_(stall_scan=scan)
        app = create_app(settings)
        async with running(app):
            assert app.state.stalls.scan_s == expected


def test_serve_with_several_workers_without_redis_is_refused(bare_env, capsys):
    assert cli.main(["serve", "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "HEADWAY_REDIS_URL" in err
    assert "--workers" in err
    assert "Traceback" not in err


def test_serve_with_zero_workers_is_refused(bare_env, capsys):
    assert cli.main(["serve", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_serve_with_bad_variable_exits_2_naming_it(bare_env, capsys):
    bare_env.setenv("HEADWAY_PROGRESS_TTL", "0")
    assert cli.main(["serve"]) == 2
    assert "HEADWAY_PROGRESS_TTL" in capsys.readouterr().err


def test_migrate_creates_the_default_database_in_the_working_directory(bare_env, tmp_path, capsys):
    bare_env.chdir(tmp_path)
    assert cli.main(["migrate"]) == 0
    assert (tmp_path / "headway.db").is_file()
    assert cli.main(["migrate"]) == 0


@pytest.mark.parametrize("command", ["migrate", "serve"])
def test_an_unreachable_database_is_one_line_and_a_failure(bare_env, tmp_path, capsys, command):
    """Nothing listens on the port, or the file is a folder: a line saying so,
    exit 1 (a supervisor restarts on it), no traceback, no password."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for url in (
        f"postgresql://headway:secret@127.0.0.1:{port}/headway",
        f"sqlite:///{tmp_path}",  # a folder, not a file
    ):
        bare_env.setenv("HEADWAY_DATABASE_URL", url)
        if command == "migrate":
            assert cli.main([command]) == 1
            err = capsys.readouterr().err
        else:  # serve migrates in a child process first, and stops on its failure
            env = {**os.environ, "HEADWAY_PORT": str(port)}
            served = subprocess.run(
                [sys.executable, "-m", "headway.cli", "serve"],
                env=env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert served.returncode == 1, served.stderr
            err = served.stderr
        assert err.startswith("headway: cannot set up the database "), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "secret" not in err


def test_head_revision_names_the_newest_migration():
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from headway.storage.database import HEAD_REVISION, MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION


class _Recorded(dict[str, str]):
    """An empty environment that records every variable asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.append(name)
        return default


def test_either_name_of_the_private_targets_setting_allows_and_both_must_agree():
    new, old = "HEADWAY_ALLOW_PRIVATE_TARGETS", "HEADWAY_WEBHOOK_ALLOW_PRIVATE"
    assert Settings.from_env({new: "true", old: "true"}).webhook_allow_private
    assert not Settings.from_env({new: "false", old: ""}).webhook_allow_private
    assert Settings.from_env({new: "", old: "true"}).webhook_allow_private
    for first, second in (("true", "false"), ("false", "true")):
        with pytest.raises(ConfigError, match="disagree"):
            Settings.from_env({new: first, old: second})


def test_every_setting_is_in_the_readme_configuration_table():
    env = _Recorded()
    Settings.from_env(env)
    table = docs.section(docs.page("configuration"), "Configuration")
    assert "HEADWAY_CHANNEL_SCHEMES" in env.asked
    for name in env.asked:
        # The rates share one row: `HEADWAY_RATE_SPACES`, `…_TASKS`, ...
        short = f"`…_{name.removeprefix('HEADWAY_RATE_')}`" if "_RATE_" in name else None
        assert f"`{name}`" in table or (short and short in table), f"{name} is not in the table"

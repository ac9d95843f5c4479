"""Real PostgreSQL and Redis servers on 127.0.0.1 for tests and benchmarks.

Each server lives in a temporary directory on a free port, can be stopped and started
again on the same port (fault tests), and is stopped at exit. A server that cannot be
started raises: nothing is skipped silently.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


class ServerError(RuntimeError):
    """A test server could not be started."""


# Ports below the kernel's ephemeral range (32768 and up), which no bind(0) or outgoing
# connection is handed: each test process takes its own block, so that two processes
# never pick the same port for their servers: pytest-xdist's gw0, gw1... the blocks 0,
# 1...; a process running beside them (scripts/test's alone and background runs, each
# part of the bench smoke) the block HEADWAY_TEST_PORT_BLOCK names.
PORTS_FROM = 20_000
PORTS_PER_PROCESS = 1_500
PORT_BLOCKS = 8
_next_port = itertools.count(random.randrange(PORTS_PER_PROCESS))


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on, in this test process's own block."""
    worker = os.environ.get("HEADWAY_TEST_PORT_BLOCK") or os.environ.get(
        "PYTEST_XDIST_WORKER", "gw0"
    ).removeprefix("gw")
    block = PORTS_FROM + (int(worker) % PORT_BLOCKS if worker.isdigit() else 0) * PORTS_PER_PROCESS
    for _ in range(PORTS_PER_PROCESS):
        port = block + next(_next_port) % PORTS_PER_PROCESS
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ServerError(f"no free port in {block}-{block + PORTS_PER_PROCESS - 1}")


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise ServerError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def _pg_tool(name: str) -> str:
    for directory in PG_BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    found = shutil.which(name)
    if found is None:
        raise ServerError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found


def _as_postgres() -> list[str]:
    """initdb and postgres refuse to run as root: run them as the postgres user."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PostgresServer:
    """A throwaway PostgreSQL cluster with trust authentication for user `headway`."""

    def __init__(self, *, durable: bool = False) -> None:
        self.port = free_port()
        # Not `durable`: commits return before their WAL is written (fast), so a crash
        # (`restart("immediate")`) may lose the last ones. Durable: as in production.
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="headway-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run(
            [
                _pg_tool("initdb"),
                "-D",
                str(self.data),
                "-U",
                "headway",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            ]
        )
        atexit.register(self.destroy)

    @property
    def url(self) -> str:
        return f"postgresql://headway@127.0.0.1:{self.port}/headway"

    def admin_url(self) -> str:
        return f"postgresql://headway@127.0.0.1:{self.port}/postgres"

    def _run(self, command: list[str]) -> None:
        result = subprocess.run(
            [*_as_postgres(), *command], capture_output=True, text=True, cwd=self.root
        )
        if result.returncode != 0:
            raise ServerError(f"{command[0]} failed: {result.stderr or result.stdout}")

    def start(self) -> PostgresServer:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off -c max_connections=200"
        )
        if not self.durable:
            options += " -c synchronous_commit=off"
        self._run(
            [
                _pg_tool("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "30",
                "start",
            ]
        )
        wait_for_port(self.port)
        return self

    def create_database(self, name: str = "headway") -> None:
        self._run(
            [
                _pg_tool("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "headway",
                "-d",
                "postgres",
                "-q",
                "-c",
                f'CREATE DATABASE "{name}"',
            ]
        )

    def restart(self, mode: str = "immediate") -> None:
        """Stop the server as `pg_ctl -m MODE` does (`immediate`: as after a crash, no
        clean shutdown) and start it again on the same port, with the same options."""
        self._run([_pg_tool("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop"])
        self.start()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run([_pg_tool("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def destroy(self) -> None:
        with contextlib.suppress(ServerError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class Pooler:
    """PgBouncer in session mode before a PostgresServer, for the suite's apps: each test
    starts an app whose connections are all new. Through the pooler, each is handed a
    server process the pooler keeps (reset with DISCARD ALL), whose caches of the tables
    are warm, instead of a new PostgreSQL process: an app's start and first statements cost
    this PostgreSQL about 4 ms of CPU instead of about 26."""

    POOL_SIZE = 120  # of the server's 200 connections; the rest for direct ones

    def __init__(self, postgres: PostgresServer) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.access(binary, os.X_OK):
            raise ServerError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.port = free_port()
        config = postgres.root / "pgbouncer.ini"
        config.write_text(
            f"[databases]\nheadway = host=127.0.0.1 port={postgres.port} dbname=headway\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            "unix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {postgres.root / 'pgbouncer.users'}\n"
            "pool_mode = session\nserver_reset_query = DISCARD ALL\n"
            f"default_pool_size = {self.POOL_SIZE}\nmax_client_conn = 2000\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {postgres.root / 'pgbouncer.log'}\n"
            "log_connections = 0\nlog_disconnections = 0\n"
        )
        (postgres.root / "pgbouncer.users").write_text('"headway" ""\n')
        # As the postgres user, as the cluster's own tools (it refuses to run as root).
        user = "postgres" if os.geteuid() == 0 else None
        self.process = subprocess.Popen(
            [binary, str(config)],
            user=user,
            group=user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port)
        atexit.register(self.stop)

    @property
    def url(self) -> str:
        return f"postgresql://headway@127.0.0.1:{self.port}/headway"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class RedisServer:
    """A Redis (or Valkey) server without persistence, as Headway runs it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.binary = shutil.which("redis-server") or shutil.which("valkey-server")
        if self.binary is None:
            raise ServerError("redis-server is not installed (apt-get install redis-server)")
        self.process: subprocess.Popen[bytes] | None = None
        atexit.register(self.stop)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port)
        return self

    def kill(self) -> None:
        """SIGKILL: gone at once, and all it held with it (it keeps nothing on disk)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


@contextlib.contextmanager
def postgres_and_redis(*, durable: bool = False) -> Iterator[tuple[PostgresServer, RedisServer]]:
    """A started PostgreSQL (with database `headway`; `durable`: see `PostgresServer`)
    and Redis, stopped afterwards."""
    postgres = PostgresServer(durable=durable).start()
    postgres.create_database()
    redis_server = RedisServer().start()
    try:
        yield postgres, redis_server
    finally:
        redis_server.stop()
        postgres.destroy()

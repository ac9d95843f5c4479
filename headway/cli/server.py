"""The server's commands: `headway serve`, `headway worker`, `headway migrate`. Server
modules are imported only when one of them runs; where the server's packages are not
installed (a client-only install) the commands are left out of the help, and each says
how to get the server."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

from ..config import ConfigError, Settings
from .parsers import command_parser, failed, installed

SERVER_EXTRA = "pip install 'headway[server]', or from a clone: pip install '.[server]'"
# What every server command imports: without them, there is no server here.
SERVER_MODULES = ("starlette", "uvicorn", "sqlalchemy", "alembic")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    listed = installed(*SERVER_MODULES)
    serve = command_parser(
        commands,
        "serve",
        "run the HTTP service",
        "Run the HTTP service: create or upgrade the database, then listen. With nothing "
        "configured: a SQLite file in the current directory, progress in memory, and the "
        "webhook worker in the same process.",
        "headway serve --port 9000\n  HEADWAY_REDIS_URL=redis://127.0.0.1:6379/0 "
        "headway serve --workers 2",
        listed=listed,
    )
    serve.add_argument("--host", help="address to listen on (HEADWAY_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (HEADWAY_PORT, default 8000)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes (more than 1 needs HEADWAY_REDIS_URL)",
    )
    serve.set_defaults(
        handler=_server_command(lambda settings, args: _serve(settings, args.workers))
    )
    worker = command_parser(
        commands,
        "worker",
        "run only the background worker (webhook delivery)",
        "Run only the background worker, which delivers webhooks, for servers started with "
        "HEADWAY_RUN_WORKER=false.",
        "HEADWAY_DATABASE_URL=postgresql://headway@127.0.0.1/headway headway worker",
        listed=listed,
    )
    worker.set_defaults(handler=_server_command(lambda settings, args: _worker(settings)))
    migrate = command_parser(
        commands,
        "migrate",
        "create or upgrade the database schema, then exit",
        "Create or upgrade the database schema, then exit (`headway serve` does it too).",
        "HEADWAY_DATABASE_URL=postgresql://headway@127.0.0.1/headway headway migrate",
        listed=listed,
    )
    migrate.set_defaults(handler=_server_command(lambda settings, args: _migrate(settings)))


def _server_command(
    run: Callable[[Settings, argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """`run` with the settings (exit status 2 if they are wrong), or a message saying how
    to install the server when a package is missing (none of the server's, or one it
    imports on the way)."""

    def handler(args: argparse.Namespace) -> int:
        if not installed(*SERVER_MODULES):
            return _not_installed(args.command)
        try:
            settings = _settings(args)
            return 2 if settings is None else run(settings, args)
        except ModuleNotFoundError as exc:
            if (exc.name or "headway").partition(".")[0] == "headway":
                raise
            return _not_installed(args.command, exc.name)

    return handler


def _not_installed(command: str, missing: str | None = None) -> int:
    """Say that `command` needs the server and how to install it; the exit status."""
    why = f" (no module {missing!r})" if missing else ""
    return failed(
        f"headway {command} needs the server, which is not installed here{why}: {SERVER_EXTRA}"
    )


def _settings(args: argparse.Namespace) -> Settings | None:
    """The settings from the environment and the flags, or None after printing why not."""
    try:
        settings = Settings.from_env()
        if args.command == "serve":
            flags = {"host": args.host or None, "port": args.port}
            settings = settings.with_(**{k: v for k, v in flags.items() if v is not None})
            if args.workers < 1:
                raise ConfigError("--workers must be at least 1")
            if args.workers > 1 and not settings.several_instances:
                raise ConfigError(
                    "--workers above 1 needs HEADWAY_REDIS_URL: in-process progress cannot be "
                    "shared between processes"
                )
    except ConfigError as exc:
        print(f"headway: {exc}", file=sys.stderr)
        return None
    return settings


def _migrate(settings: Settings) -> int:
    from sqlalchemy.exc import DBAPIError

    from ..domain.errors import DatabaseUnavailable
    from ..storage.database import Database

    async def run() -> None:
        db = Database(settings.database_url)
        try:
            await db.migrate()
        finally:
            await db.close()

    try:
        asyncio.run(run())
    except (OSError, DBAPIError, DatabaseUnavailable) as exc:
        # Unreachable, refused, or a file that cannot be opened: one line, no traceback
        # (`headway serve` migrates first, so it says this too, and exits with it).
        reason = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        where = _redact(settings.database_url)
        return failed(f"headway: cannot set up the database {where}: {reason}")
    print("headway: database is up to date", flush=True)
    return 0


def _worker(settings: Settings) -> int:
    import logging.config
    import signal

    from ..app import make_worker
    from ..background.loops import stop
    from ..domain.clock import SystemClock
    from ..ops.logs import server_log_config
    from ..storage.database import Database

    logging.config.dictConfig(server_log_config())  # deliveries logged as under serve

    async def run() -> int:
        db = Database(settings.database_url)
        await db.migrate()
        worker = make_worker(settings, db, SystemClock())
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        print(f"headway: worker {worker.id} delivering events", flush=True)
        _prepare_metrics(settings, serves_app=False)  # on HEADWAY_METRICS_PORT if set
        # Stopped by a signal, however many cancellations it takes (see `loops.stop`).
        delivering = asyncio.create_task(worker.run(), name="headway-worker")
        signalled = asyncio.create_task(stopping.wait())
        try:
            await asyncio.wait({delivering, signalled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await stop(delivering, signalled)
            await worker.close()
            await db.close()
        return 0 if delivering.cancelled() else 1  # its error, if it ended, is logged

    return asyncio.run(run())


def _serve(settings: Settings, workers: int) -> int:
    import subprocess

    from ..api.server import serve

    # Migrate in a child process: the server then finds its schema current and never
    # loads the migration machinery. `-P`: `-m` would put the working directory first on
    # the path, and any `headway/` folder there would shadow the installed package.
    migrated = subprocess.run(
        [sys.executable, "-P", "-m", "headway.cli", "migrate"],
        stdout=subprocess.DEVNULL,
        check=False,
    )
    if migrated.returncode != 0:
        return migrated.returncode

    try:
        metrics_dir = _prepare_metrics(settings, workers)
    except OSError as exc:
        return failed(f"headway: cannot serve metrics: {exc}")
    progress = "Redis" if settings.several_instances else "process memory"
    address, browser = _address(settings), _browser_address(settings)
    print(
        f"Headway listening on {address} — open {'it' if browser == address else browser} "
        f"in a browser (database {_redact(settings.database_url)}, progress in {progress})",
        flush=True,
    )
    try:
        return serve(settings, workers)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _prepare_metrics(
    settings: Settings, workers: int = 1, *, serves_app: bool = True
) -> str | None:
    """Before serving: with several worker processes, a fresh directory where each one
    writes its counts, for any of them to merge when scraped (prometheus_client's
    multiprocess mode; returned, to delete at exit); with HEADWAY_METRICS_PORT, the
    metrics' own server, which measures what the app of this process serves from, or
    (`serves_app` false, or several worker processes) what `_measure_alone` opens. Raises
    OSError if that port is taken."""
    if not settings.metrics:
        return None
    directory = None
    if workers > 1:  # set before anything imports prometheus_client, and inherited
        directory = tempfile.mkdtemp(prefix="headway-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    if settings.metrics_port is not None:
        from ..ops.metrics import serve_port

        if not serves_app or workers > 1:
            _measure_alone(settings)
        try:
            serve_port(settings)
        except OSError:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
            raise
        url = f"http://{settings.host}:{settings.metrics_port}/metrics"
        print(f"headway: metrics on {url}", flush=True)
    return directory


def _measure_alone(settings: Settings) -> None:
    """For the metrics port of a process where no app serves (`headway worker`, or the
    parent of several server processes): a database and, with Redis, a progress store
    of its own, opened once on an event loop of their own for every scrape to measure."""
    import threading

    from ..app import make_progress_store
    from ..domain.clock import SystemClock
    from ..ops import metrics
    from ..storage.database import Database

    opened = threading.Event()

    async def hold() -> None:
        try:
            db = Database(settings.database_url)
            progress = None
            if settings.redis_url is not None:
                progress = make_progress_store(settings, SystemClock())
            metrics.serving(db, progress)
        finally:
            opened.set()
        await asyncio.Event().wait()  # held, with its connections, while the process lives

    thread = threading.Thread(target=asyncio.run, args=(hold(),), name="headway-metrics")
    thread.daemon = True
    thread.start()
    opened.wait()


def _address(settings: Settings) -> str:
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    return f"http://{host}:{settings.port}"


def _browser_address(settings: Settings) -> str:
    """Where a person opens the dashboard: HEADWAY_PUBLIC_URL if set; else the address
    listened on, or this machine's loopback when it listens on every address."""
    if settings.public_url:
        return settings.public_url
    if settings.host in ("0.0.0.0", ""):
        return f"http://127.0.0.1:{settings.port}"
    if settings.host == "::":
        return f"http://[::1]:{settings.port}"
    return _address(settings)


def _redact(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        credentials, _, host = rest.rpartition("@")
        user = credentials.split(":", 1)[0]
        return f"{scheme}{sep}{user}:***@{host}"
    return url

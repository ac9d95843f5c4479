"""A disk that really fills: a small tmpfs, filled to the last byte by a filler file.

SQLite: a real `headway serve` with its database there. With the free-space minimum off,
the database's own disk-full errors reach the service: every create is answered 201 or
503 (never 500, never a cut connection), reports go on, the database stays whole with
every acknowledged task in it, and creates work again once the filler is gone, without a
restart. With the default minimum, creates are refused by the budget before the disk is
full.

PostgreSQL: a database in a tablespace on the tmpfs (its write-ahead log stays on the
server's own disk, as when a data volume fills): its disk_full errors (SQLSTATE 53100)
answer 503 the same way, and the service recovers the same way.

Mounting needs root, as CI runs: without it these tests are skipped; as root, a mount
that fails (a container without CAP_SYS_ADMIN) fails them, so that CI never skips them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pwd
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from headway.app import create_app
from headway.config import Settings

from .conftest import needs_redis, running
from .live_server import LiveServer

DISK_MIB = 20
UNAVAILABLE = "A backing service is unavailable"  # the database's own errors
BUDGET = "The database's disk is almost full"  # the budget's refusal


@contextlib.contextmanager
def small_disk(directory: Path, owner: str | None = None) -> Iterator[Path]:
    """A tmpfs of DISK_MIB at `directory` (owned by the user `owner`, if named),
    unmounted on the way out."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    directory.mkdir()
    options = f"size={DISK_MIB}m,mode=0755"
    if owner is not None:
        user = pwd.getpwnam(owner)
        options = f"size={DISK_MIB}m,mode=0700,uid={user.pw_uid},gid={user.pw_gid}"
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.fail(
            f"root, yet cannot mount a tmpfs ({mount.stderr.strip()}): in a container, "
            "give it CAP_SYS_ADMIN (docker run --cap-add SYS_ADMIN)"
        )
    try:
        yield directory
    finally:
        if subprocess.run(["umount", str(directory)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", str(directory)], check=True)


def fill(filler: Path) -> int:
    """Write `filler` until its filesystem has no byte left; its size."""
    with open(filler, "ab", buffering=0) as out:
        for block in (b"\0" * 1024 * 1024, b"\0" * 4096, b"\0"):
            while True:
                try:
                    out.write(block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return filler.stat().st_size


def free_bytes(directory: Path) -> int:
    disk = os.statvfs(directory)
    return disk.f_bavail * disk.f_frsize


def database_check(path: Path) -> tuple[str, set[str]]:
    """`PRAGMA integrity_check` of the database, and the uuids of its tasks."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (integrity,) = connection.execute("PRAGMA integrity_check").fetchone()
        uuids = {uuid for (uuid,) in connection.execute("SELECT uuid FROM tasks")}
    finally:
        connection.close()
    return integrity, uuids


async def create_tasks(http: httpx.AsyncClient, space: str, count: int) -> list[httpx.Response]:
    """`count` creates at once (so that several share a commit), each 201 or 503."""
    title = "t" * 200
    answers = await asyncio.gather(
        *(http.post(f"/spaces/{space}/tasks", json={"title": title}) for _ in range(count))
    )
    for answer in answers:
        assert answer.status_code in (201, 503), answer.text
        if answer.status_code == 503:
            assert answer.headers["retry-after"].isdigit()
            assert answer.json()["error"]
    return list(answers)


async def until_up_says(http: httpx.AsyncClient, status: str) -> dict:
    """`GET /up` until its disk check says `status` (it measures at most once a second);
    the body, which is 200 whatever the disk."""
    deadline = time.monotonic() + 5
    while True:
        up = await http.get("/up")
        assert up.status_code == 200, up.text
        if up.json()["checks"]["disk"]["status"] == status:
            return up.json()
        assert time.monotonic() < deadline, up.json()
        await asyncio.sleep(0.1)


async def until_created(http: httpx.AsyncClient, space: str, acknowledged: set[str]) -> float:
    """Create until one is 201 (room came back); the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < 10:
        answers = await create_tasks(http, space, 1)
        if answers[0].status_code == 201:
            acknowledged.add(answers[0].json()["uuid"])
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    pytest.fail("creates did not work again within 10 s of making room")


async def test_a_full_disk_answers_503_keeps_the_database_whole_and_recovers(tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        database = disk / "headway.db"
        filler = disk / "filler"
        acknowledged: set[str] = set()
        env = {"HEADWAY_DATABASE_URL": f"sqlite:///{database}", "HEADWAY_RATE_LIMITS": "false"}

        # 1. No free-space minimum: the database's own disk-full errors answer.
        with LiveServer(tmp_path, HEADWAY_DISK_FREE_MIN="0", **env) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                space = (await http.post("/spaces", json={})).json()["uuid"]
                running = (await http.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
                acknowledged.add(running)
                for answer in await create_tasks(http, space, 20):
                    assert answer.status_code == 201
                    acknowledged.add(answer.json()["uuid"])

                fill(filler)
                assert free_bytes(disk) == 0
                refused = 0
                for _ in range(50):  # until the database has no room left, then more
                    for answer in await create_tasks(http, space, 10):
                        if answer.status_code == 201:
                            acknowledged.add(answer.json()["uuid"])
                        else:
                            assert UNAVAILABLE in answer.json()["error"]
                            refused += 1
                    if refused >= 30:
                        break
                assert refused >= 30, "the disk filled, yet the database took every create"
                # Reports and reads go on.
                for current in range(1, 6):
                    report = await http.put(f"/tasks/{running}", json={"current": current})
                    assert report.status_code == 200, report.text
                read = await http.get(f"/spaces/{space}")
                assert read.status_code == 200
                assert {task["uuid"] for task in read.json()["tasks"]} == acknowledged
                up = await until_up_says(http, "full")  # measured again within a second
                assert up["status"] == "degraded"
                assert up["checks"]["disk"]["free_bytes"] == 0
                integrity, stored = database_check(database)
                assert integrity == "ok"
                assert stored == acknowledged, "every acknowledged task, and only those"

                filler.unlink()
                await until_created(http, space, acknowledged)  # no restart
                for answer in await create_tasks(http, space, 20):
                    assert answer.status_code == 201
                    acknowledged.add(answer.json()["uuid"])
                assert (await until_up_says(http, "ok"))["status"] == "ok"
        integrity, stored = database_check(database)
        assert integrity == "ok"
        assert stored == acknowledged

        # 2. The default minimum (1 MiB of this 20 MiB disk, 5%): creates are refused
        # before the disk is full.
        with LiveServer(tmp_path, **env) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                size = fill(filler)
                os.truncate(filler, size - 768 * 1024)  # 768 KiB left: under the minimum
                disk_check = (await until_up_says(http, "full"))["checks"]["disk"]
                assert disk_check["limit"] == "HEADWAY_DISK_FREE_MIN"
                assert disk_check["limit_bytes"] == DISK_MIB * 1024 * 1024 // 20
                assert 0 < disk_check["free_bytes"] < disk_check["limit_bytes"]
                for answer in await create_tasks(http, space, 20):
                    assert answer.status_code == 503
                    assert BUDGET in answer.json()["error"]
                    assert answer.headers["retry-after"] == "30"
                report = await http.put(f"/tasks/{running}", json={"current": 9})
                assert report.status_code == 200
                assert free_bytes(disk) > 0, "refused before the disk was full"

                filler.unlink()
                await until_created(http, space, acknowledged)
        integrity, stored = database_check(database)
        assert integrity == "ok"
        assert stored == acknowledged


@needs_redis  # that is, PostgreSQL is among the backends tested
async def test_a_full_postgres_tablespace_answers_503_and_recovers(shared_servers, caplog):
    postgres, _ = shared_servers
    # Where the server's user (postgres, as tests.servers runs it) can reach it: pytest's
    # directories are root's alone.
    place = Path(tempfile.mkdtemp(prefix="headway-disk-"))
    place.chmod(0o755)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, place, ignore_errors=True)
        disk = cleanup.enter_context(small_disk(place / "disk", owner="postgres"))
        admin = await asyncpg.connect(postgres.admin_url())
        try:
            await admin.execute(f"CREATE TABLESPACE headway_small LOCATION '{disk}'")
            await admin.execute("CREATE DATABASE headway_disk TABLESPACE headway_small")
            url = postgres.url.rsplit("/", 1)[0] + "/headway_disk"
            settings = Settings(database_url=url, run_worker=False, rate_limits=False)
            app = create_app(settings)
            async with running(app):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://hw") as http:
                    await _fill_and_recover(app, http, disk / "filler")
            # The 503s were PostgreSQL's disk_full (SQLSTATE 53100), nothing else.
            failures = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
            assert failures
            assert all("No space left on device" in failure for failure in failures)
        finally:
            await admin.execute("DROP DATABASE IF EXISTS headway_disk")
            await admin.execute("DROP TABLESPACE IF EXISTS headway_small")
            await admin.close()


async def _fill_and_recover(app, http: httpx.AsyncClient, filler: Path) -> None:
    acknowledged: set[str] = set()
    space = (await http.post("/spaces", json={})).json()["uuid"]
    running_task = (await http.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
    acknowledged.add(running_task)
    fill(filler)
    refused = 0
    for _ in range(200):  # until the tablespace has no room left, then more
        for answer in await create_tasks(http, space, 10):
            if answer.status_code == 201:
                acknowledged.add(answer.json()["uuid"])
            else:
                assert UNAVAILABLE in answer.json()["error"]
                refused += 1
        if refused >= 30:
            break
    assert refused >= 30, "the disk filled, yet the database took every create"
    report = await http.put(f"/tasks/{running_task}", json={"current": 1})
    assert report.status_code == 200, report.text
    up = await http.get("/up")
    assert up.status_code == 200, up.text
    assert up.json()["checks"]["disk"]["free_bytes"] is None  # the server's disk, not ours
    stored = await app.state.service.db.fetch("SELECT uuid FROM tasks", ())
    assert {row[0] for row in stored} == acknowledged, "every acknowledged task, and only those"

    filler.unlink()
    await until_created(http, space, acknowledged)  # no restart
    for answer in await create_tasks(http, space, 20):
        assert answer.status_code == 201
        acknowledged.add(answer.json()["uuid"])
    stored = await app.state.service.db.fetch("SELECT uuid FROM tasks", ())
    assert {row[0] for row in stored} == acknowledged

"""One run of the scale-out deployment through three faults, on real servers: two
`headway serve` instances and a `headway worker` on a PostgreSQL and a Redis of the
test's own, under a steady load through both instances and with live streams open on
both, while PostgreSQL restarts as after a crash, Redis is killed and comes back empty,
and instance B is killed and started again. Every answer is a success or a documented
503 that stops soon after the dependency is back; nothing acknowledged is lost, nothing
refused is kept; streams agree with reads; every finish is delivered to the webhook."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from .conftest import BACKENDS
from .fault_load import Answer, Fault, Load, Recorder, StreamTrack, flattened
from .live_server import HeadwayProcess, LiveServer
from .receiver import Receiver
from .servers import PostgresServer, RedisServer, postgres_and_redis

pytestmark = pytest.mark.skipif(
    "postgres" not in BACKENDS, reason="HEADWAY_TEST_BACKENDS excludes postgres"
)

LOAD_S = 3.0  # load before the first fault and after each
OUTAGE_S = 1.0  # Redis stays away this long before it starts again
UP_WITHIN_S = 30.0  # every instance's /up answers 200 this soon after a fault ends
# The two below bound what could otherwise never end (a pool handing out dead connections
# for good; a stream that never resyncs), far above what they take on a calm machine
# (about 1 s and 0.2 s), so that a busy one does not fail them.
LATE_503_S = 15.0  # no 503 comes later than this after its dependency is back
CONVERGE_S = 10.0  # streams hold what reads show this soon after the last write
DELIVERED_WITHIN_S = 20.0  # after the load stops


@dataclass(frozen=True)
class Cluster:
    postgres: PostgresServer
    redis: RedisServer
    a: LiveServer
    b: LiveServer
    started: float  # before the servers started


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    started = time.monotonic()
    # Durable: the crash must not lose commits already acknowledged (as in production).
    with postgres_and_redis(durable=True) as (postgres, redis_server):
        env = {
            "HEADWAY_DATABASE_URL": postgres.url,
            "HEADWAY_REDIS_URL": redis_server.url,
            "HEADWAY_RUN_WORKER": "false",
            "HEADWAY_RATE_LIMITS": "false",
            "HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true",
        }
        a, b = LiveServer(tmp_path, **env), LiveServer(tmp_path, **env)
        worker = HeadwayProcess(tmp_path, "worker", **env)
        with contextlib.ExitStack() as running:
            for process in (a, b, worker):
                running.enter_context(process)
            yield Cluster(postgres, redis_server, a, b, started)
        print_logged_errors(tmp_path)


def print_logged_errors(directory: Path) -> None:
    """The errors the processes logged, every run of each (for the report of a run)."""
    for path in sorted(directory.glob("headway-*.err")):
        lines = [line for line in path.read_text(errors="replace").splitlines() if line]
        flagged = [line for line in lines if "ERROR" in line or "Traceback" in line]
        if flagged:
            print(f"{path.name}: {len(flagged)} error lines, first: {flagged[0]}")


@contextlib.asynccontextmanager
async def clients(cluster: Cluster) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    timeout = httpx.Timeout(10.0, read=30.0)  # a stream's keep-alive comes every 15 s
    async with (
        httpx.AsyncClient(base_url=cluster.a.url, timeout=timeout) as a,
        httpx.AsyncClient(base_url=cluster.b.url, timeout=timeout) as b,
    ):
        yield {"A": a, "B": b}


async def until_up(instances: dict[str, httpx.AsyncClient]) -> float:
    """Poll every instance's /up until each answers 200; when they all have."""
    deadline = time.monotonic() + UP_WITHIN_S
    for name, client in instances.items():
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await client.get("/up")).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"{name} not up {UP_WITHIN_S} s after a fault"
            await asyncio.sleep(0.05)
    return time.monotonic()


async def fault(name: str, action: Callable[[], object]) -> Fault:
    """Run `action` (blocking: the servers' own commands) beside the load; the fault
    ends when it returns, its server answering again."""
    started = time.monotonic()
    await asyncio.to_thread(action)
    return Fault(name, started, time.monotonic())


def redis_outage(redis_server: RedisServer) -> None:
    redis_server.kill()
    time.sleep(OUTAGE_S)  # real time away: the fault itself
    redis_server.start()


def instance_crash(server: LiveServer) -> None:
    assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    server.start()  # the same port; returns once its /up answers 200


async def open_streams(
    instances: dict[str, httpx.AsyncClient], space: str, recorder: Recorder
) -> list[StreamTrack]:
    """A stream on each instance, once each has shown its first snapshot."""
    tracks = [StreamTrack(client, name, space, recorder) for name, client in instances.items()]
    deadline = time.monotonic() + UP_WITHIN_S
    while not all(track.openings for track in tracks):
        if time.monotonic() > deadline:
            await asyncio.gather(*(track.close() for track in tracks))
            pytest.fail(f"a stream did not open within {UP_WITHIN_S} s")
        await asyncio.sleep(0.02)
    return tracks


async def family_read_through_b(
    load: Load, instances: dict[str, httpx.AsyncClient]
) -> tuple[str, str]:
    """A parent and its child, created through A, whose family B has read (and cached,
    by a report) at the version the child's create gave it; their uuids."""
    a, b = instances["A"], instances["B"]
    parent = await load.create(a, "A", "family", {"title": "family"})
    assert parent is not None
    child = await load.create(a, "A", "family", {"title": "first", "parent_uuid": parent})
    assert child is not None
    await family_read(load, b, parent, [child], "before")
    return parent, child


async def family_read(
    load: Load, client: httpx.AsyncClient, parent: str, children: list[str], when: str
) -> None:
    """A report on `parent` through B (which decides on B's cached family), then a read:
    both answer with `children`."""
    for method in ("PUT", "GET"):
        body = {"json": {"values": {"seen": when}}} if method == "PUT" else {}
        answer = await load.recorder.call(client, "B", "family", method, f"/tasks/{parent}", **body)
        assert answer.status == 200, answer
        shown = [c["uuid"] for c in answer.body["children"]]
        assert shown == children, f"{method} through B {when} the Redis restart: {answer}"


async def check_family_after_restart(
    load: Load, instances: dict[str, httpx.AsyncClient], parent: str, first: str
) -> None:
    """A child created through A after the Redis restart (its family's count in Redis
    starting again from where B read it) shows in B's report and read of its parent."""
    deadline = time.monotonic() + LATE_503_S
    child = None
    while child is None:
        body = {"title": "second", "parent_uuid": parent}
        child = await load.create(instances["A"], "A", "family", body)
        if child is None:
            assert time.monotonic() < deadline, "no child created after Redis came back"
            await asyncio.sleep(0.1)
    await family_read(load, instances["B"], parent, [first, child], "after")


async def run_faults(
    cluster: Cluster, instances: dict[str, httpx.AsyncClient], load: Load
) -> tuple[list[Fault], list[StreamTrack]]:
    """The load's phases: streams opened on both instances before the faults and after
    each; a parent's family read through B before Redis goes and checked after."""
    faults: list[Fault] = []
    tracks = await open_streams(instances, load.space, load.recorder)
    try:
        await asyncio.sleep(LOAD_S)
        faults.append(
            await fault("postgres restart", lambda: cluster.postgres.restart("immediate"))
        )
        await until_up(instances)
        tracks += await open_streams(instances, load.space, load.recorder)
        parent, first = await family_read_through_b(load, instances)
        await asyncio.sleep(LOAD_S)
        faults.append(await fault("redis kill", lambda: redis_outage(cluster.redis)))
        await until_up(instances)
        await check_family_after_restart(load, instances, parent, first)
        tracks += await open_streams(instances, load.space, load.recorder)
        await asyncio.sleep(LOAD_S)
        faults.append(await fault("instance B kill", lambda: instance_crash(cluster.b)))
        await until_up(instances)
        tracks += await open_streams(instances, load.space, load.recorder)
        await asyncio.sleep(LOAD_S)
    except BaseException:
        await asyncio.gather(*(track.close() for track in tracks))
        raise
    return faults, tracks


def fault_of(answer: Answer, faults: list[Fault]) -> Fault | None:
    """The last fault begun before the answer came (None: before any)."""
    begun = [f for f in faults if f.started <= answer.at]
    return begun[-1] if begun else None


def check_answers(answers: list[Answer], faults: list[Fault]) -> None:
    """Every answer a success or a documented 503, no 503 late after its fault; no
    answer missing but B's, while B was down."""
    for answer in answers:
        assert answer.status in (200, 201, 503, None), answer
        if answer.status == 503:
            assert isinstance(answer.body, dict) and isinstance(answer.body["error"], str), answer
            assert answer.retry_after is not None and answer.retry_after.isdigit(), answer
            cause = fault_of(answer, faults)
            assert cause is not None, f"a 503 before any fault: {answer}"
            late = answer.at - cause.ended
            assert late <= LATE_503_S, f"a 503 {late:.2f} s after {cause.name} ended: {answer}"
        if answer.status is None:
            crash = next(f for f in faults if f.name == "instance B kill")
            assert answer.instance == "B", f"A did not answer: {answer}"
            assert crash.started <= answer.at <= crash.ended, f"B did not answer: {answer}"


def fault_figures(answers: list[Answer], faults: list[Fault]) -> list[str]:
    lines = []
    for index, f in enumerate(faults):
        mine = [a for a in answers if fault_of(a, faults) is f and a.status in (503, None)]
        refused = [a for a in mine if a.status == 503]
        last_503 = f"{max(a.at for a in refused) - f.ended:+.2f} s" if refused else "none"
        last = f"{max(a.at for a in mine) - f.ended:+.2f} s" if mine else "none"
        lines.append(
            f"fault {index + 1} ({f.name}): {f.ended - f.started:.2f} s until back; "
            f"503s {len(refused)}, unanswered {len(mine) - len(refused)}; "
            f"last 503 {last_503} and last failure {last} from its return"
        )
    return lines


async def read_truth(
    instances: dict[str, httpx.AsyncClient], space: str
) -> dict[str, dict[str, object]]:
    """Every task of the space (one full read) as `GET /tasks/{uuid}` shows it now, with
    `children: []` as its stream events show it; the reads alternate instances."""
    answer = await instances["A"].get(f"/spaces/{space}")
    assert answer.status_code == 200, answer.text
    uuids = list(flattened(answer.json()))
    clients = list(instances.values())
    limit = asyncio.Semaphore(8)

    async def read(index: int, uuid: str) -> dict[str, object]:
        async with limit:
            response = await clients[index % len(clients)].get(f"/tasks/{uuid}")
        assert response.status_code == 200, (uuid, response.text)
        return {**response.json(), "children": []}

    views = await asyncio.gather(*(read(i, uuid) for i, uuid in enumerate(uuids)))
    return dict(zip(uuids, views, strict=True))


async def check_stored(
    load: Load, instances: dict[str, httpx.AsyncClient], truth: dict[str, dict]
) -> None:
    """What was acknowledged is there (created, finished), through either instance; and
    no more tasks than those acknowledged and those whose answer never came."""
    assert load.created <= set(truth), f"acknowledged creates missing: {load.created - set(truth)}"
    clients = list(instances.values())
    for index, uuid in enumerate(sorted(load.created)):
        response = await clients[index % 2].get(f"/tasks/{uuid}")
        assert response.status_code == 200, (uuid, response.text)
        if uuid in load.finished:
            assert response.json()["finished_at"] is not None, response.json()
    extra = len(truth) - len(load.created)
    assert 0 <= extra <= load.unanswered_creates, (
        f"{len(truth)} tasks stored, {len(load.created)} creates acknowledged, "
        f"{load.unanswered_creates} unanswered"
    )


def disagreement(track: StreamTrack, truth: dict[str, dict]) -> list[str]:
    """How a stream's state differs from the reads (nothing once it agrees): the tasks
    it lacks, and for each it shows otherwise, the fields that differ (shown, read)."""
    found = [f"{track.instance}: missing {uuid}" for uuid in truth if uuid not in track.tasks]
    for uuid, shown in track.tasks.items():
        read = truth.get(uuid)
        if read is None:
            found.append(f"{track.instance}: {uuid} shown, not in the space")
        elif read != shown:
            fields = {
                key: (shown.get(key), read.get(key))
                for key in read
                if shown.get(key) != read.get(key)
            }
            found.append(f"{track.instance}: {uuid} differs {fields}")
    return found


async def check_streams(tracks: list[StreamTrack], truth: dict[str, dict], last: float) -> float:
    """Every stream holds what the reads show, for every task of the space, within
    CONVERGE_S of the last write; the seconds the slowest took from that write."""
    deadline = last + CONVERGE_S
    while any(disagreement(track, truth) for track in tracks) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    wrong = [line for track in tracks for line in disagreement(track, truth)]
    assert not wrong, f"{len(wrong)} disagreements, first: {wrong[:3]}"
    took = max(track.changed_at for track in tracks) - last
    assert took <= CONVERGE_S, f"a stream took {took:.2f} s after the last write"
    return max(took, 0.0)


async def check_deliveries(receiver: Receiver, finished: set[str], since: float) -> float:
    """Every acknowledged finish delivered (by task; duplicates allowed) within
    DELIVERED_WITHIN_S of `since`, when the load stopped; the seconds from then to the
    first delivery of the last task to get one (negative: before it stopped)."""
    while True:
        first: dict[str, float] = {}
        for delivery in list(receiver.deliveries):
            first.setdefault(json.loads(delivery.body)["data"]["uuid"], delivery.at)
        if finished <= set(first):
            return max((first[uuid] for uuid in finished), default=since) - since
        missing = finished - set(first)
        late = time.monotonic() - since
        assert late < DELIVERED_WITHIN_S, f"{len(missing)} finishes never delivered: {missing}"
        await asyncio.sleep(0.05)


async def new_space(client: httpx.AsyncClient, receiver: Receiver) -> str:
    space = (await client.post("/spaces", json={"title": "fault run"})).json()["uuid"]
    hook = await client.post(f"/spaces/{space}/webhooks", json={"url": receiver.url})
    assert hook.status_code == 201, hook.text
    return space


@pytest.mark.alone  # its streams converge on a clock: run by itself
async def test_a_run_through_three_faults_loses_nothing_acknowledged(cluster):
    receiver = Receiver().start()
    try:
        async with clients(cluster) as instances:
            load = Load(Recorder(), await new_space(instances["A"], receiver))
            loaders = [asyncio.create_task(load.run(c, n)) for n, c in instances.items()]
            try:
                faults, tracks = await run_faults(cluster, instances, load)
            finally:
                load.stop.set()
                await asyncio.gather(*loaders)
            stopped = time.monotonic()
            print_figures(load, faults)
            try:
                truth = await read_truth(instances, load.space)
                converged = await check_streams(tracks, truth, load.last_write)
            finally:
                await asyncio.gather(*(track.close() for track in tracks))
            print(
                f"{len(tracks)} streams, {sum(t.openings for t in tracks)} openings, "
                f"converged {converged:.2f} s after the last write"
            )
            check_answers(load.recorder.answers, faults)
            await check_stored(load, instances, truth)
            delivered = await check_deliveries(receiver, load.finished, stopped)
    finally:
        receiver.stop()
    print(
        f"the last finish's first delivery {delivered:+.2f} s from the load's end; "
        f"total {time.monotonic() - cluster.started:.1f} s (servers started included)"
    )


def print_figures(load: Load, faults: list[Fault]) -> None:
    answers = load.recorder.answers
    for line in fault_figures(answers, faults):
        print(line)
    print(
        f"{len(answers)} answers, {len(load.created)} creates acknowledged "
        f"({load.unanswered_creates} unanswered), {len(load.finished)} finishes acknowledged"
    )

"""Answers that must not cost the client a report or a second task: any Retry-After is read
as 0-60 s and never raises; the final report is retried through 429s and 5xx until the
process exits, bounded by HEADWAY_FLUSH_TIMEOUT, and what was lost is named in one
warning; the reporter's thread survives any answer; creates carry an Idempotency-Key, the
same on every try, so that a create whose answer was lost makes one task.

The server is a real `headway serve`; `Gate` stands in front of it to answer what a test
crafts, and `LosingProxy` to lose an answer after the server committed it."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from headway import APIError, AsyncClient, Client
from headway.client import calls
from headway.client.client import flush_timeout_from_environment

from .live_server import (
    Gate,
    LiveServer,
    LosingProxy,
    environment,
    exit_seconds,
    headway_command,
    timing_its_exit,
)
from .servers import free_port

FAST = {"min_interval": 0.05, "backoff": (0.05, 0.2), "exit_timeout": 5.0}


@pytest.fixture
def gate(server: LiveServer) -> Iterator[Gate]:
    gate = Gate(server.url).open()
    yield gate
    gate.close()


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="headway")
    return caplog


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "headway" and r.levelno >= logging.WARNING
    ]


def new_task(server: LiveServer, space: str, title: str) -> str:
    """A task made on the server directly, not through the gate."""
    with Client(server.url) as client:
        return client.create_task(title, space=space)


def in_seconds(seconds: float, zone: timezone | None = UTC) -> Callable[[], str]:
    """An HTTP date `seconds` from now in `zone` (None: `-0000`, UTC of unknown origin)."""

    def header() -> str:
        moment = datetime.now(UTC) + timedelta(seconds=seconds)
        if zone is None:
            return format_datetime(moment.replace(tzinfo=None))
        return format_datetime(moment.astimezone(zone), usegmt=zone is UTC)

    return header


def fixed(text: str) -> Callable[[], str]:
    return lambda: text


# Each Retry-After a server (or anything in front of it) may send, and the seconds the
# client reads from it: None means unreadable, the client's own backoff decides.
RETRY_AFTERS = {
    "seconds": (fixed("7"), 7.0),
    "fraction": (fixed("2.5"), 2.5),
    "beyond a minute": (fixed("120"), 60.0),
    "negative": (fixed("-5"), 0.0),
    "inf": (fixed("inf"), 60.0),
    "-inf": (fixed("-inf"), 0.0),
    "beyond a float": (fixed("1e400"), 60.0),
    "nan": (fixed("nan"), None),
    "garbage": (fixed("soon, maybe"), None),
    "empty": (fixed(""), None),
    "too long": (fixed("9" * 100), None),
    "date in GMT": (in_seconds(30), 30.0),
    "date in -0000": (in_seconds(30, None), 30.0),
    "date in +0200": (in_seconds(30, timezone(timedelta(hours=2))), 30.0),
    "date in -0700": (in_seconds(30, timezone(timedelta(hours=-7))), 30.0),
    "date with a zone name": (
        lambda: in_seconds(30, timezone(timedelta(hours=-5)))().replace("-0500", "EST"),
        30.0,
    ),
    "date past": (in_seconds(-3600), 0.0),
    "date far ahead": (fixed("Fri, 31 Dec 9999 23:59:59 GMT"), 60.0),
    "impossible date": (fixed("Wed, 99 Oct 2015 07:28:00 GMT"), None),
}


@pytest.mark.parametrize(("header", "seconds"), RETRY_AFTERS.values(), ids=RETRY_AFTERS.keys())
def test_any_retry_after_is_read_as_0_to_60_seconds(
    header: Callable[[], str], seconds: float | None, gate: Gate
) -> None:
    gate.refuse(1, 429, retry_after=header())
    with Client(gate.url, **FAST) as client, pytest.raises(APIError) as refused:  # type: ignore[arg-type]
        client.get_task(str(uuid.uuid4()))
    assert refused.value.status == 429
    if seconds is None:
        assert refused.value.retry_after is None
    else:
        assert refused.value.retry_after == pytest.approx(seconds, abs=2)


def test_retry_after_dates_are_read_against_now_in_every_zone() -> None:
    now = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
    assert calls.retry_after("Tue, 24 Nov 2026 12:00:30 GMT", now=now) == 30
    assert calls.retry_after("Tue, 24 Nov 2026 12:00:30 -0000", now=now) == 30
    assert calls.retry_after("Tue, 24 Nov 2026 14:00:30 +0200", now=now) == 30
    assert calls.retry_after("Tue, 24 Nov 2026 07:00:30 EST", now=now) == 30
    assert calls.retry_after("Tue, 24 Nov 2026 12:00:00 GMT", now=now) == 0
    assert calls.retry_after("Tue, 24 Nov 2026 13:00:00 GMT", now=now) == 60
    assert calls.retry_after(None) is None


# The answers the final report may get first: each is retried, then the report arrives.
FINAL_REFUSALS = {
    **{f"429, Retry-After {name}": (429, header) for name, (header, _) in RETRY_AFTERS.items()},
    "500": (500, None),
    "502": (502, None),
    "503, Retry-After inf": (503, fixed("inf")),
    "507": (507, None),
}


@pytest.mark.parametrize(("status", "header"), FINAL_REFUSALS.values(), ids=FINAL_REFUSALS.keys())
def test_the_final_report_is_delivered_after_a_429_or_5xx_whatever_its_retry_after(
    status: int,
    header: Callable[[], str] | None,
    server: LiveServer,
    served_space: str,
    gate: Gate,
) -> None:
    task = new_task(server, served_space, "refused at the end")
    with Client(gate.url, **FAST) as client:  # type: ignore[arg-type]
        reporter = client.reporter(task)
        gate.refuse(1, status, retry_after=header() if header else None)
        reporter.finish(values={"rows": 3})
        # A wait asked beyond the flush's end still gets a last try before it ends: at 3 s,
        # the flush's last second its own (sender.LAST_TRY_AHEAD), not half of one.
        assert reporter.flush(4.0)
        assert [arrival.status for arrival in gate.puts()] == [status, 200]
        assert server.task(task)["finished_at"] is not None
        assert server.task(task)["progress"]["values"] == {"rows": 3}

        # The thread that got this answer is alive: the next report goes.
        later = client.create_task("after the refusal", space=served_space)
        follow = client.reporter(later)
        follow.report(1, 2)
        assert follow.flush(2.0)
        assert server.task(later)["progress"]["current"] == 1


def test_many_429s_and_5xxs_on_the_final_report_are_retried_until_it_arrives(
    server: LiveServer, served_space: str, gate: Gate, logged: pytest.LogCaptureFixture
) -> None:
    for status in (429, 500, 502, 503, 504, 429):
        gate.refuse(1, status, retry_after="0")
    with Client(gate.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
        with client.task("persistent") as task:
            pass
        assert task.flush(5)
    assert [arrival.status for arrival in gate.arrivals] == [429, 500, 502, 503, 504, 429, 201, 200]
    assert server.task(task.uuid or "")["finished_at"] is not None
    [warning] = warnings(logged)
    assert "did not take a report" in warning
    assert any("takes reports again" in r.getMessage() for r in logged.records)


def test_a_4xx_on_the_final_report_is_logged_once_and_not_retried(
    server: LiveServer, served_space: str, gate: Gate, logged: pytest.LogCaptureFixture
) -> None:
    task = new_task(server, served_space, "refused")
    with Client(gate.url, **FAST) as client:  # type: ignore[arg-type]
        reporter = client.reporter(task)
        gate.refuse(1, 400)
        reporter.report(1, 2)
        assert reporter.flush(5)
        gate.refuse(1, 409)
        reporter.finish()
        assert reporter.flush(5)
    assert [arrival.status for arrival in gate.puts()] == [400, 409]
    assert warnings(logged) == [
        "Headway: a report of task None was dropped: Refused by the test's gate. (HTTP 400)",
        "Headway: the final report of task None was dropped: Refused by the test's gate. "
        "(HTTP 409)",
    ]
    assert server.task(task)["finished_at"] is None


def test_an_answer_that_cannot_be_read_is_retried_and_the_thread_goes_on(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    task = new_task(server, served_space, "garbled")
    gate.answer(200, {"content-encoding": "gzip", "content-length": "9"}, b"not gzip!")
    gate.answer(502, {"content-type": "text/html"}, b"<html>Bad gateway</html>")
    gate.answer(503, {"retry-after": "Wed, 21 Oct 2015 07:28:00 -0000"}, b"")
    with Client(gate.url, **FAST) as client:  # type: ignore[arg-type]
        reporter = client.reporter(task)
        reporter.finish(log="done")
        assert reporter.flush(5)
    assert [arrival.status for arrival in gate.puts()] == [200, 502, 503, 200]
    assert server.task(task)["progress"]["values"] == {"log": "done"}


@pytest.mark.parametrize(
    ("status", "retry_after", "tries"),
    [(500, None, None), (503, "inf", 2)],
    ids=["500 forever", "503 with Retry-After inf forever"],
)
def test_a_server_failing_forever_costs_the_flush_timeout_and_one_warning_names_the_loss(
    status: int, retry_after: str | None, tries: int | None, served_space: str, gate: Gate
) -> None:
    gate.refuse(100_000, status, retry_after=retry_after)
    script = textwrap.dedent(
        """
        from headway import Client

        client = Client(backoff=(0.05, 0.2))
        with client.task("Nightly backup") as task:
            task.report(1, 2)
        """
    )
    env = environment(HEADWAY_URL=gate.url, HEADWAY_SPACE=served_space, HEADWAY_FLUSH_TIMEOUT="1.5")
    result = subprocess.run(
        [sys.executable, "-c", timing_its_exit(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    # It waited the flush timeout, then gave up (late on a busy machine, never early).
    assert 1.5 <= exit_seconds(result.stdout) < 1.5 + 5
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert "did not take a report" in lines[0]
    assert lines[1] == (
        f"Headway at {gate.url}: not delivered within 1.5 s, given up: "
        "the final report of task 'Nightly backup'"
    )
    assert served_space not in result.stderr
    if tries is not None:  # the first try, then one last try before giving up
        assert len(gate.arrivals) == tries


@pytest.mark.alone  # measures time: run by itself (scripts/test)
def test_the_warning_at_exit_names_what_was_lost_by_title_in_one_line(served_space: str) -> None:
    script = textwrap.dedent(
        """
        from headway import Client

        client = Client(backoff=(0.05, 0.2))
        for title in ("Backup", "Deploy", "Train", "Index", "Mail"):
            client.reporter(title=title).finish()
        for title in ("Running 1", "Running 2"):
            client.reporter(title=title).report(1, 2)
        """
    )
    down = f"http://127.0.0.1:{free_port()}"
    env = environment(HEADWAY_URL=down, HEADWAY_SPACE=served_space, HEADWAY_FLUSH_TIMEOUT="0.3")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    [_, warning] = result.stderr.strip().splitlines()  # the outage, then what was lost
    lost = re.fullmatch(
        f"Headway at {re.escape(down)}: not delivered within 0.3 s, given up: the final "
        "reports of tasks '(\\w+)', '(\\w+)', '(\\w+)' and 2 more; the latest progress of 2 tasks",
        warning,
    )
    assert lost is not None, warning
    assert len(set(lost.groups()) & {"Backup", "Deploy", "Train", "Index", "Mail"}) == 3


def test_headway_flush_timeout_defaults_to_10_and_a_bad_one_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("HEADWAY_FLUSH_TIMEOUT", raising=False)
    assert flush_timeout_from_environment() == 10
    assert Client("http://127.0.0.1:9").exit_timeout == 10
    monkeypatch.setenv("HEADWAY_FLUSH_TIMEOUT", "2.5")
    assert Client("http://127.0.0.1:9").exit_timeout == 2.5
    assert Client("http://127.0.0.1:9", exit_timeout=1).exit_timeout == 1
    assert warnings(logged) == []
    for bad in ("soon", "-1", "inf", "nan"):
        monkeypatch.setenv("HEADWAY_FLUSH_TIMEOUT", bad)
        assert Client("http://127.0.0.1:9").exit_timeout == 10
    assert warnings(logged) == [
        f"Headway: HEADWAY_FLUSH_TIMEOUT must be a number of seconds, at least 0, not {bad!r}: "
        "10 s it is"
        for bad in ("soon", "-1", "inf", "nan")
    ]


def test_a_bad_flush_timeout_never_stops_headway_run(served_space: str, server: LiveServer) -> None:
    env = environment(
        HEADWAY_URL=server.url, HEADWAY_SPACE=served_space, HEADWAY_FLUSH_TIMEOUT="soon"
    )
    result = subprocess.run(
        [*headway_command(), "run", "--", "true"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "HEADWAY_FLUSH_TIMEOUT must be a number of seconds" in result.stderr
    [task] = server.space(served_space)["tasks"]
    assert task["finished_at"] is not None


def posts(gate: Gate) -> list[tuple[int, str | None]]:
    return [(arrival.status, arrival.key) for arrival in gate.arrivals if arrival.method == "POST"]


def test_creates_are_retried_with_one_idempotency_key_each(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.refuse(1, 429, retry_after="0")
    gate.refuse(1, 503)
    with Client(gate.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
        space = client.create_space("Retried")
        gate.refuse(2, 502)
        task = client.create_task("Retried")
        other = client.create_task("Another")
    (a, b, c), (d, e, f), (g,) = posts(gate)[:3], posts(gate)[3:6], posts(gate)[6:]
    assert [a[0], b[0], c[0]] == [429, 503, 201] and a[1] == b[1] == c[1]
    assert [d[0], e[0], f[0]] == [502, 502, 201] and d[1] == e[1] == f[1]
    assert g[0] == 201
    keys = {a[1], d[1], g[1]}
    assert None not in keys and len(keys) == 3  # one key per create
    assert all(0 < len(key or "") <= 255 for key in keys)
    assert server.space(space.uuid or "")["title"] == "Retried"
    assert [t["uuid"] for t in server.space(served_space)["tasks"]] == [task, other]


async def test_the_async_client_retries_creates_with_one_key(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.refuse(2, 503)
    async with AsyncClient(gate.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
        task = await client.create_task("async retried")
    [(s1, k1), (s2, k2), (s3, k3)] = posts(gate)
    assert (s1, s2, s3) == (503, 503, 201) and k1 == k2 == k3 is not None
    assert [t["uuid"] for t in server.space(served_space)["tasks"]] == [task]


def test_create_retries_are_bounded_and_a_refusal_is_not_retried(
    served_space: str, gate: Gate
) -> None:
    gate.refuse(10, 503)
    with Client(gate.url, space=served_space, **FAST, retries=2) as client:  # type: ignore[arg-type]
        with pytest.raises(APIError) as failed:
            client.create_task("never")
        assert failed.value.status == 503
        assert len(posts(gate)) == 3  # the first try and two more
        gate._refusals.clear()
        gate.refuse(3, 422)
        with pytest.raises(APIError):
            client.create_task("refused")
    assert len(posts(gate)) == 4
    # Reads and reports are sent once: only a create carries a key that makes a retry safe.
    gate.refuse(1, 503)
    with Client(gate.url, **FAST) as client, pytest.raises(APIError):  # type: ignore[arg-type]
        client.get_task(str(uuid.uuid4()))
    assert gate.arrivals[-1].key is None


def test_a_reporter_creates_its_task_with_one_key_across_retries(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.refuse(2, 503)
    with Client(gate.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
        with client.task("background") as task:
            pass
        assert task.flush(5)
    [(s1, k1), (s2, k2), (s3, k3)] = posts(gate)
    assert (s1, s2, s3) == (503, 503, 201) and k1 == k2 == k3 is not None
    assert [t["uuid"] for t in server.space(served_space)["tasks"]] == [task.uuid]


def test_headway_run_creates_its_task_with_one_key_across_retries(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.refuse(2, 503)
    env = environment(HEADWAY_URL=gate.url, HEADWAY_SPACE=served_space)
    result = subprocess.run(
        [*headway_command(), "run", "--", "true"], env=env, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    [(s1, k1), (s2, k2), (s3, k3)] = posts(gate)
    assert (s1, s2, s3) == (503, 503, 201) and k1 == k2 == k3 is not None
    [task] = server.space(served_space)["tasks"]
    assert task["finished_at"] is not None


def test_headway_task_create_retries_with_one_key(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.refuse(1, 500)
    result = subprocess.run(
        [*headway_command(), "task", "create", "--title", "cli", "--space", served_space],
        env=environment(HEADWAY_URL=gate.url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    [(s1, k1), (s2, k2)] = posts(gate)
    assert (s1, s2) == (500, 201) and k1 == k2 is not None
    assert [t["uuid"] for t in server.space(served_space)["tasks"]] == [result.stdout.strip()]


@pytest.mark.parametrize("way", ["Client.create_task", "a reporter"])
def test_a_create_whose_answer_was_lost_makes_one_task(
    way: str, server: LiveServer, served_space: str
) -> None:
    proxy = LosingProxy(server.url, losses=1, method="POST")
    try:
        with Client(proxy.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
            if way == "Client.create_task":
                answered = client.create_task("once")
            else:
                with client.task("once") as reporter:
                    pass
                assert reporter.flush(5)
                answered = reporter.uuid
    finally:
        proxy.close()
    assert proxy.lost == 1  # the first create was committed, its answer lost
    made = [task["uuid"] for task in server.space(served_space)["tasks"]]
    assert made == [answered]  # the retry, with the same key, was answered the first answer


def test_a_parents_refused_first_report_goes_before_its_step_is_made(
    gate: Gate, server: LiveServer, served_space: str
) -> None:
    """A parent's first report, refused by an outage, is not overtaken by its step: the
    parent is held open by it, so its only step finishing does not finish it."""
    parent_uuid = new_task(server, served_space, "Deploy")
    gate.refuse(1, 503, retry_after="0")  # the parent's first report
    with Client(gate.url, space=served_space, **FAST) as client:
        parent = client.reporter(parent_uuid)
        parent.report(log="starting")
        with parent.step("Build"):
            pass
        assert client.close(5)
    family = server.task(parent_uuid)
    assert [step["finished_at"] is not None for step in family["children"]] == [True]
    assert family["finished_at"] is None
    assert family["progress"]["values"] == {"log": "starting"}
    assert [arrival.status for arrival in gate.arrivals][:2] == [503, 200]


def test_a_steps_retried_final_report_still_goes_before_its_parents(
    gate: Gate, server: LiveServer, served_space: str
) -> None:
    """A retry keeps its place in line: the step's final report, refused once, is sent
    again before the parent's, which was queued after it."""
    with Client(gate.url, space=served_space, **FAST) as client:
        parent = client.reporter(title="Deploy")
        parent.report(log="starting")
        step = parent.step("Build")
        step.report(1, 2)
        assert step.flush(5) and parent.flush(5)
        gate.refuse(1, 503, retry_after="0")  # the step's final report
        step.finish()
        parent.finish()
        assert client.close(5)
    family = server.task(parent.uuid or "")
    [built] = family["children"]
    assert built["finished_at"] is not None
    assert family["finished_at"] >= built["finished_at"]
    finals = [arrival.path for arrival in gate.puts()][-3:]
    assert finals == [f"/tasks/{step.uuid}", f"/tasks/{step.uuid}", f"/tasks/{parent.uuid}"]

"""Reporters never hurt the job: reports are coalesced, sent from a background thread,
retried while the server is down, slow or refusing (429, 503), and the final state
arrives, also at interpreter exit. Tasks as context managers and decorators, and steps.

The server is real; `Gate` stands in front of it to count requests, refuse them, delay
them, or not be there at all."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import headway
from headway import Client
from headway.client.reporter import exception_line
from headway.domain.failure import Failure, failure_of

from .live_server import Gate, LiveServer, environment, exit_seconds, timing_its_exit

FAST = {"min_interval": 0.05, "backoff": (0.05, 0.2), "exit_timeout": 5.0}


@pytest.fixture
def gate(server: LiveServer) -> Iterator[Gate]:
    gate = Gate(server.url)
    yield gate
    gate.close()


@pytest.fixture
def client(server: LiveServer, served_space: str) -> Iterator[Client]:
    with Client(server.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
        yield client


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="headway")
    return caplog


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "headway" and r.levelno == level]


def only_task(server: LiveServer, served_space: str) -> dict:
    [task] = server.space(served_space)["tasks"]
    return task


def test_ten_thousand_reports_in_a_tight_loop_send_a_few_and_the_last_arrives(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.open()
    with Client(gate.url, space=served_space, min_interval=0.5) as client:
        reporter = client.reporter(title="tight loop")
        for i in range(10_000):
            reporter.report(i, 10_000, log=f"line {i}")
        assert reporter.flush(5)
        task = only_task(server, served_space)
    assert len(gate.puts()) <= 3
    assert task["progress"]["current"] == 9_999
    assert task["progress"]["values"] == {"log": "line 9999"}


@pytest.mark.alone  # measures time: run by itself (scripts/test)
def test_a_task_reporting_all_the_time_sends_at_most_one_report_per_interval(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    gate.open()
    with Client(gate.url, space=served_space, min_interval=0.1) as client:
        reporter = client.reporter(title="busy")
        start = time.monotonic()
        count = 0
        while time.monotonic() - start < 1.0:
            count += 1
            reporter.report(count)
        assert reporter.flush(5)
    puts = gate.puts()
    # 1 s at most one per 0.1 s, plus the last; a busy machine's server may answer fewer
    # (the reporter waits for each answer), never more.
    assert 2 <= len(puts) <= 12
    sent = [arrival.at for arrival in puts[:-1]]  # the last one was flushed
    assert (sent[-1] - sent[0]) / (len(sent) - 1) >= 0.09
    assert only_task(server, served_space)["progress"]["current"] == count


def test_a_server_that_is_down_never_holds_up_the_job_and_gets_the_final_state_when_back(
    server: LiveServer, served_space: str, gate: Gate, logged: pytest.LogCaptureFixture
) -> None:
    client = Client(gate.url, space=served_space, **FAST)  # type: ignore[arg-type]
    start = time.monotonic()
    with client.task("offline job") as task:
        for i in range(1000):
            task.report(i, 1000, log=f"item {i}")
        with task.step("check") as step:
            step.report(log="checked")
    # Only a hang guard: a job that waited out the retries' backoff would take a minute.
    # That it waits for no answer at all: test_a_slow_server_never_holds_up_the_job.
    assert time.monotonic() - start < 10
    time.sleep(0.3)  # some retries fail meanwhile
    assert not task.flush(0.1)

    gate.open()
    assert task.flush(5) and step.flush(5)
    client.close()
    read = only_task(server, served_space)
    assert read["finished_at"] is not None
    assert read["progress"]["values"] == {"log": "item 999"}
    assert [child["title"] for child in read["children"]] == ["check"]
    assert read["children"][0]["progress"]["values"] == {"log": "checked"}
    [warning] = messages(logged, logging.WARNING)
    assert "did not take a report" in warning
    assert messages(logged, logging.INFO) == [f"Headway at {gate.url} takes reports again"]


def test_429_and_503_are_retried_after_retry_after_and_backoff(
    server: LiveServer, served_space: str, gate: Gate, logged: pytest.LogCaptureFixture
) -> None:
    gate.refuse(1, 429, retry_after="1")
    gate.refuse(2, 503)
    gate.open()
    with Client(gate.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]
        with client.task("refused") as task:
            task.report(1, 2)
        assert task.flush(5)
    statuses = [arrival.status for arrival in gate.arrivals]
    assert statuses[:4] == [429, 503, 503, 201]
    at = [arrival.at for arrival in gate.arrivals]
    assert at[1] - at[0] >= 0.95  # Retry-After: 1, over a backoff of 0.05
    assert at[2] - at[1] >= 0.09  # then 0.1
    assert at[3] - at[2] >= 0.19  # then 0.2, the longest
    assert only_task(server, served_space)["finished_at"] is not None
    assert len(messages(logged, logging.WARNING)) == 1


def test_a_slow_server_never_holds_up_the_job(
    server: LiveServer, served_space: str, gate: Gate
) -> None:
    """The job runs to its end while the server holds every request it was sent, none
    answered: no report, create or finish waits for an answer."""
    gate.open().hold()
    with Client(gate.url, space=served_space, **FAST) as client:  # type: ignore[arg-type]

        def job() -> None:
            with client.task("slow server") as task:
                for i in range(100):
                    task.report(i, 100)
                    time.sleep(0.001)
            ran.append(task)

        ran: list[Any] = []
        worker = threading.Thread(target=job, daemon=True)
        worker.start()
        worker.join(30)  # a job that waited would wait for ever: the gate holds
        held = list(gate.arrivals)
        gate.release()
        assert not worker.is_alive() and held == [], held
        [task] = ran
        assert task.flush(5)
    read = only_task(server, served_space)
    assert read["finished_at"] is not None
    assert read["progress"]["current"] == 99


def test_a_report_that_cannot_go_is_logged_once_and_later_ones_arrive(
    client: Client, server: LiveServer, served_space: str, logged: pytest.LogCaptureFixture
) -> None:
    reporter = client.reporter(title="too long")
    reporter.report(values={"note": "x" * 2000})
    assert reporter.flush(5)
    reporter.report(float("nan"))
    assert reporter.flush(5)
    reporter.report(1, 2, values={"note": "short"})
    assert reporter.flush(5)
    assert only_task(server, served_space)["progress"]["values"] == {"note": "short"}
    [warning] = messages(logged, logging.WARNING)
    assert warning.startswith("Headway: a report of task 'too long' was dropped: ")
    assert warning.endswith("(HTTP 400)")


def test_a_task_that_cannot_be_created_is_dropped_with_a_warning(
    server: LiveServer, logged: pytest.LogCaptureFixture
) -> None:
    with Client(server.url, space=str(uuid.uuid4()), **FAST) as client:  # type: ignore[arg-type]
        with client.task("nowhere") as task:
            task.report(1, 2)
        assert task.flush(5)
        assert task.uuid is None
    [warning] = messages(logged, logging.WARNING)
    assert "could not be created" in warning and "No such space" in warning


def test_without_a_space_a_task_warns_and_the_job_goes_on(
    server: LiveServer, monkeypatch: pytest.MonkeyPatch, logged: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("HEADWAY_SPACE", raising=False)
    with Client(server.url, **FAST) as client:  # type: ignore[arg-type]
        with client.task("unplaced") as task:
            task.report(1)
        assert task.flush(5)
    [warning] = messages(logged, logging.WARNING)
    assert "no space given" in warning


def test_a_task_block_reports_that_work_started_then_finishes(
    client: Client, server: LiveServer, served_space: str
) -> None:
    with client.task("block", source="tests") as task:
        assert headway.current_task() is task
        assert task.flush(5)
        started = server.task(task.uuid or "")
        assert started["progress"] is not None and started["finished_at"] is None
        assert started["source"] == "tests"
        task.report(3, 7)
    assert headway.current_task() is None
    assert task.finished and task.flush(5)
    finished = server.task(task.uuid or "")
    assert finished["finished_at"] is not None
    assert (finished["progress"]["current"], finished["progress"]["end"]) == (3, 7)


def test_an_exception_is_reported_with_its_type_message_and_last_line_then_raised(
    client: Client, server: LiveServer, served_space: str
) -> None:
    with pytest.raises(ValueError, match="bad input"), client.task("failing") as task:
        task.report(2, 5, values={"host": "web-1"}, log="reading")
        raise ValueError("bad input")
    assert task.flush(5)
    read = server.task(task.uuid or "")
    assert read["finished_at"] is not None
    assert (read["progress"]["current"], read["progress"]["end"]) == (2, 5)
    assert read["progress"]["values"] == {
        "host": "web-1",
        "error": "ValueError: bad input",
        "error_type": "ValueError",
        "error_message": "bad input",
        "log": "ValueError: bad input",
    }
    assert failure_of(read) == Failure("ValueError: bad input")


def test_an_exceptions_error_is_its_last_line_in_one_line_without_notes() -> None:
    noted = ValueError("bad input")
    noted.add_note("while reading row 3")
    assert exception_line(noted) == "ValueError: bad input"
    assert exception_line(KeyError("missing")) == "KeyError: 'missing'"
    assert exception_line(RuntimeError("first\nsecond\n")) == "RuntimeError: first second"
    assert exception_line(TimeoutError()) == "TimeoutError"
    with pytest.raises(SyntaxError) as caught:
        compile("1 +", "job.py", "exec")
    assert exception_line(caught.value) == "SyntaxError: invalid syntax"


def test_an_exception_whose_text_cannot_be_made_is_still_reported(
    client: Client, server: LiveServer, served_space: str
) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    with pytest.raises(Unprintable), client.task("unprintable") as task:
        raise Unprintable()
    assert task.flush(5)
    values = server.task(task.uuid or "")["progress"]["values"]
    assert values["error"].endswith(".Unprintable: <exception str() failed>")
    assert values["error_message"] == "Unprintable"


def test_a_decorated_function_is_a_new_task_at_each_call(
    client: Client, server: LiveServer, served_space: str
) -> None:
    @client.task("nightly")
    def nightly(n: int) -> int:
        task = headway.current_task()
        assert task is not None
        task.report(n, 10)
        return n * 2

    assert nightly(3) == 6 and nightly(4) == 8
    client.close()
    tasks = server.space(served_space)["tasks"]
    assert [(t["title"], t["progress"]["current"]) for t in tasks] == [
        ("nightly", 3),
        ("nightly", 4),
    ]
    assert all(t["finished_at"] for t in tasks)


async def test_a_decorated_coroutine_is_a_new_task_at_each_call(
    client: Client, server: LiveServer, served_space: str
) -> None:
    @client.task("async nightly")
    async def nightly() -> str:
        task = headway.current_task()
        assert task is not None
        task.report(log="awaited")
        raise RuntimeError("gone wrong")

    with pytest.raises(RuntimeError):
        await nightly()
    client.close()
    [task] = server.space(served_space)["tasks"]
    assert task["finished_at"] is not None
    assert task["progress"]["values"]["error_type"] == "RuntimeError"
    assert task["progress"]["values"]["error"] == "RuntimeError: gone wrong"


def test_steps_are_child_tasks_and_a_step_of_a_step_is_another_step(
    client: Client, server: LiveServer, served_space: str
) -> None:
    with client.task("pipeline") as task:
        with task.step("fetch") as fetch:
            fetch.report(5, 10)
            deeper = fetch.step("fetch part 2")
            deeper.finish()
        task.step("planned")
    client.close()
    [read] = server.space(served_space)["tasks"]
    assert [child["title"] for child in read["children"]] == ["fetch", "fetch part 2", "planned"]
    fetched, part, planned = read["children"]
    assert fetched["finished_at"] is not None and part["finished_at"] is not None
    assert planned["progress"] is None  # created, never reported
    assert read["progress"]["aggregated"] and read["finished_at"] is not None


def test_a_reporter_for_an_existing_task_reports_and_finishes_it(
    client: Client, server: LiveServer
) -> None:
    existing = client.create_task("existing")
    reporter = client.reporter(existing)
    reporter.report(4, 8, log="half")
    reporter.finish()
    reporter.report(5, 8)  # ignored: finished
    assert reporter.flush(5)
    read = server.task(existing)
    assert read["finished_at"] is not None
    assert (read["progress"]["current"], read["progress"]["values"]) == (4, {"log": "half"})


def test_the_final_state_is_delivered_at_interpreter_exit(
    server: LiveServer, served_space: str
) -> None:
    script = textwrap.dedent(
        """
        from headway import Client

        reporter = Client(min_interval=60).reporter(title="exiting")
        for i in range(1000):
            reporter.report(i, 10_000, log=f"item {i}")
        """
    )
    env = environment(HEADWAY_URL=server.url, HEADWAY_SPACE=served_space)
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    read = only_task(server, served_space)
    assert read["progress"]["current"] == 999
    assert read["progress"]["values"] == {"log": "item 999"}


def test_at_exit_a_server_that_is_down_costs_at_most_the_exit_timeout(gate: Gate) -> None:
    script = textwrap.dedent(
        """
        from headway import Client

        client = Client(exit_timeout=0.5, backoff=(0.05, 0.2))
        with client.task("unreported") as task:
            for i in range(100_000):
                task.report(i)
        """
    )
    env = environment(HEADWAY_URL=gate.url, HEADWAY_SPACE=str(uuid.uuid4()))
    result = subprocess.run(
        [sys.executable, "-c", timing_its_exit(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    # The exit waited its timeout, and gave up then, not at the end of the retries' backoff
    # (a busy machine may make it late, never early).
    assert 0.5 <= exit_seconds(result.stdout) < 0.5 + 5
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 2, result.stderr
    assert "did not take a report" in warnings[0]
    assert warnings[1] == (
        f"Headway at {gate.url}: not delivered within 0.5 s, given up: "
        "the final report of task 'unreported'"
    )

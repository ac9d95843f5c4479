"""The rule of failure (`headway.domain.failure`, named in `headway.domain.tasks` too):
which finished tasks failed, when a parent failed through its steps, and how its failed
steps are named."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from headway.domain import tasks as domain
from headway.domain.failure import (
    FailedStep,
    Failure,
    failed_error,
    failed_steps,
    failure_of,
    task_failure,
)


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"error": "exit code 3"}, "exit code 3"),
        ({"error": "ValueError: bad input", "error_type": "ValueError"}, "ValueError: bad input"),
        ({"error": " "}, " "),  # not empty: a reporter said something
        ({"error": ""}, None),
        ({"error": 3}, None),
        ({"error": 0}, None),
        ({"error": True}, None),
        ({"error": False}, None),
        ({"error_type": "ValueError", "exit_code": 2}, None),  # only `error` decides
        ({}, None),
        (None, None),
    ],
)
def test_only_a_non_empty_string_in_error_is_an_error(
    values: dict[str, Any] | None, error: str | None
) -> None:
    assert failed_error(values) == error


def test_an_active_task_with_an_error_has_not_failed() -> None:
    assert task_failure(finished=False, values={"error": "retrying"}) is None
    assert task_failure(finished=True, values={"error": "gave up"}) == Failure("gave up")
    assert task_failure(finished=True, values={"log": "ok", "error": ""}) is None


def test_a_failure_is_its_own_error_when_no_step_failed() -> None:
    failure = task_failure(finished=True, values={"error": "exit code 3"})
    assert failure is not None
    assert failure.steps_summary is None
    assert failure.message == "exit code 3"


def test_a_parent_with_one_failed_step_names_it() -> None:
    steps = [
        ("Build image", True, {"exit_code": 0}),
        ("Run migrations", True, {"exit_code": 3, "error": "exit code 3"}),
        ("Switch traffic", True, {}),
    ]
    failure = task_failure(finished=True, values={}, steps=steps)
    assert failure == Failure(None, (FailedStep("Run migrations", "exit code 3"),), 3)
    assert failure.message == "1 of 3 steps failed (Run migrations: exit code 3)"


def test_a_parent_failed_itself_and_through_its_steps() -> None:
    failure = task_failure(
        finished=True,
        values={"error": "exit code 1"},
        steps=[(None, True, {"error": "boom"})],
    )
    assert failure is not None
    assert failure.message == "exit code 1; 1 of 1 step failed (Untitled step: boom)"


def test_only_finished_steps_fail_and_many_are_named_up_to_three() -> None:
    steps = [(f"Step {n}", True, {"error": f"error {n}"}) for n in range(5)]
    steps.append(("Still running", False, {"error": "retrying"}))
    steps.append(("Fine", True, {"error": ""}))
    assert [step.title for step in failed_steps(steps)] == [f"Step {n}" for n in range(5)]
    failure = task_failure(finished=True, values=None, steps=steps)
    assert failure is not None
    assert failure.message == (
        "5 of 7 steps failed (Step 0: error 0; Step 1: error 1; Step 2: error 2; 2 more)"
    )


def test_a_parent_whose_steps_all_passed_has_not_failed() -> None:
    steps = [("A", True, {"exit_code": 0}), ("B", False, {"error": "x"})]
    assert task_failure(finished=True, values={"log": "done"}, steps=steps) is None


def test_the_failure_of_a_task_as_its_json_shows_it() -> None:
    def task(title: str, *, finished: bool, values: dict | None, children=()) -> dict:
        progress = None if values is None else {"values": values}
        return {
            "title": title,
            "finished_at": "2026-11-24T10:00:00.000000Z" if finished else None,
            "progress": progress,
            "children": list(children),
        }

    deploy = task(
        "Deploy",
        finished=True,
        values={},
        children=[
            task("Build", finished=True, values={}),
            task("Run migrations", finished=True, values={"error": "exit code 3"}),
            task("Expired", finished=True, values=None),  # its progress expired
        ],
    )
    failure = failure_of(deploy)
    assert failure is not None
    assert failure.message == "1 of 3 steps failed (Run migrations: exit code 3)"
    assert failure_of(task("Quiet", finished=True, values=None)) is None
    assert failure_of(task("Busy", finished=False, values={"error": "x"})) is None


def test_a_views_failure_is_judged_with_its_childrens_values() -> None:
    def row(uuid: str, title: str, parent: str | None = None) -> domain.TaskRow:
        return domain.TaskRow(uuid, "s", parent, title, None, 1_000_000, 2_000_000, 1)

    def progress(values: bytes) -> domain.Progress:
        return domain.Progress(None, None, msgspec.Raw(values), 1_500_000)

    build = (row("b", "Build", "p"), progress(b'{"exit_code":0}'))
    migrate = (row("m", "Run migrations", "p"), progress(b'{"error":"exit code 3"}'))
    parent = row("p", "Deploy")
    view = domain.view(parent, None, [build, migrate])
    failure = domain.view_failure(view)
    assert failure is not None
    assert failure.message == "1 of 2 steps failed (Run migrations: exit code 3)"
    # Children already encoded, as the family cache holds them, are judged the same.
    encoded = [domain.view_json(*build), domain.view_json(*migrate)]
    cached = domain.view(parent, None, children_json=encoded, aggregate=(2, 1_500_000))
    assert domain.view_failure(cached) == failure
    assert domain.view_failure(domain.view(*build)) is None


def test_the_domain_names_the_same_rule() -> None:
    assert domain.failed_error is failed_error
    assert domain.task_failure is task_failure
    assert domain.failure_of is failure_of
    assert domain.Failure is Failure

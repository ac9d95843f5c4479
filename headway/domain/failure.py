"""What failure means, decided once: a finished task whose `values.error` is a non-empty
string has failed; a parent has failed when it did itself or when any of its steps did; and
the words that name a parent's failed steps. Standard library only, so that the server
(through `domain`, which re-exports it), the client and `headway watch` share one rule.
The pages' script (`web/static/tasks.js`) holds the same rule in JavaScript; a test holds
the two to the same answers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

# How many failed steps a summary names before it only counts the rest.
NAMED_STEPS = 3
UNTITLED_STEP = "Untitled step"

# A step as the rule reads it: (title, finished, values).
Step = tuple[str | None, bool, Mapping[str, Any] | None]


def failed_error(values: Mapping[str, Any] | None) -> str | None:
    """The error `values` report: `values["error"]` when it is a non-empty string, else
    None (a number, a boolean or an empty string there is just a value). A finished task
    that reports one has failed; an active one has not failed, whatever its values say."""
    error = values.get("error") if values else None
    return error if isinstance(error, str) and error else None


class FailedStep(NamedTuple):
    """A step that failed: its title (None when untitled) and its error."""

    title: str | None
    error: str


def failed_steps(steps: Iterable[Step]) -> tuple[FailedStep, ...]:
    """The steps that failed (finished, with an error), in the order given."""
    failed = []
    for title, finished, values in steps:
        error = failed_error(values) if finished else None
        if error is not None:
            failed.append(FailedStep(title, error))
    return tuple(failed)


class Failure(NamedTuple):
    """How a finished task failed: its own error (None when only its steps failed), the
    steps that failed, and how many steps it has in all."""

    error: str | None
    steps: tuple[FailedStep, ...] = ()
    total_steps: int = 0

    @property
    def steps_summary(self) -> str | None:
        """`1 of 3 steps failed (Run migrations: exit code 3)`; None when no step failed.
        Names the first NAMED_STEPS failed steps, then counts the others."""
        if not self.steps:
            return None
        named = [f"{title or UNTITLED_STEP}: {error}" for title, error in self.steps[:NAMED_STEPS]]
        if len(self.steps) > NAMED_STEPS:
            named.append(f"{len(self.steps) - NAMED_STEPS} more")
        noun = "step" if self.total_steps == 1 else "steps"
        return f"{len(self.steps)} of {self.total_steps} {noun} failed ({'; '.join(named)})"

    @property
    def message(self) -> str:
        """What went wrong, in one line: the task's own error, its failed steps, or both
        (`exit code 1; 1 of 3 steps failed (Run migrations: exit code 3)`)."""
        return "; ".join(part for part in (self.error, self.steps_summary) if part)


def task_failure(
    *, finished: bool, values: Mapping[str, Any] | None, steps: Iterable[Step] = ()
) -> Failure | None:
    """The failure of a task (its `steps`: its children, if it is a parent), or None when
    it has not failed: it is still active, or neither it nor any step reports an error.
    A parent that finished with failed steps has failed, even if it reported no error."""
    if not finished:
        return None
    steps = list(steps)
    failed = failed_steps(steps)
    error = failed_error(values)
    if error is None and not failed:
        return None
    return Failure(error, failed, len(steps))


def failure_of(task: Mapping[str, Any]) -> Failure | None:
    """`task_failure` of a task as its JSON shows it (`GET /tasks/{uuid}`, a share link's
    read, a stream's event or a completion event's `data`), steps from its `children`."""

    def values(item: Mapping[str, Any]) -> Mapping[str, Any] | None:
        progress = item.get("progress")
        return progress.get("values") if progress else None

    return task_failure(
        finished=task.get("finished_at") is not None,
        values=values(task),
        steps=(
            (child.get("title"), child.get("finished_at") is not None, values(child))
            for child in task.get("children") or ()
        ),
    )

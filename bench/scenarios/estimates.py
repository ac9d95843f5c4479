"""What keeping estimates costs a report: the same PUT on two fresh embedded servers (rate
limits off), one keeping each task's track of reports (the default) and one with
`HEADWAY_ESTIMATES=false`, measured alternately (`paired`); and its target."""

from __future__ import annotations

from ..measure import Harness
from ..report import Row, Target
from .paired import paired, paired_target

ESTIMATE_ROWS = ["put_tracked", "put_untracked"]
ESTIMATES_TARGET = "estimates: keeping each task's track costs a report little"
RATIO = 1.05  # a report's CPU with tracks against without, at most


def estimates_cost(bench: Harness) -> None:
    paired(
        bench, ("put_tracked", "put_untracked"), {"put_untracked": {"HEADWAY_ESTIMATES": "false"}}
    )


def estimates_targets(rows: dict[str, Row]) -> list[Target]:
    """A report keeping its task's track costs at most RATIO times one that does not."""
    return [
        paired_target(
            rows,
            ("put_tracked", "put_untracked"),
            target="estimates_cpu",
            description=f"PUT /tasks/{{t}} with estimates on: CPU/req ≤ {RATIO}x of off",
            group=ESTIMATES_TARGET,
            most=RATIO,
        )
    ]

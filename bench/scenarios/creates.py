"""The creates scenario: POST of new tasks into one space."""

from __future__ import annotations

from ..load import Load
from ..measure import Harness
from ..processes import ServerProcess


def post_task(bench: Harness, server: ServerProcess, space: str) -> None:
    """`post_task`: wrk POSTs a new task into `space`, again and again."""
    post_body = '{"title":"bench task","source":"bench"}'
    bench.measure(server, "post_task", Load("POST", [f"/spaces/{space}/tasks"], post_body))

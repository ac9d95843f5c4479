"""Reading jobs (see `headway.domain.jobs`): a space's jobs of newest activity, each with its
counts, its usual duration and its newest runs. Jobs are
written by the creates and finishes of their tasks (`service.tasks`, `service.families`)
and counted out by their deletes (`storage.deletes`)."""

from __future__ import annotations

from ..domain.jobs import LAST_RUNS, USUAL_RUNS, Job, Run, usual
from ..domain.tasks import format_ts
from ..storage import jobs
from .context import NO_SPACE, Stores, canonical
from .reads import parse_limit
from .spaces import Spaces

# The jobs a read answers without `limit`, and at most with one: an answer is whole, not
# streamed, so it stays under about half a megabyte (a job with titles of 200 emoji and
# its 30 runs is about 5 KB).
DEFAULT_LIMIT = MAX_LIMIT = 100


class Jobs:
    """A space's jobs, as `GET /spaces/{s}/jobs` and its share link's twin answer them."""

    def __init__(self, stores: Stores, spaces: Spaces) -> None:
        self._stores = stores
        self._spaces = spaces

    async def list(self, space_uuid: str, limit: int | str | None = None) -> list[Job]:
        """The space's `limit` jobs (default `DEFAULT_LIMIT`, at most `MAX_LIMIT`) of
        newest activity (a task created or finished), newest first. Each read costs the
        same whatever the history: a row per job, and two index scans for its runs."""
        wanted = min(parse_limit(limit) or DEFAULT_LIMIT, MAX_LIMIT)
        key = canonical(space_uuid, NO_SPACE)
        await self._spaces.head(key)  # 404 for a space that is not there
        async with self._stores.db.read() as fetch:
            rows = await jobs.space_jobs(fetch, key, wanted)
            ids = [row[0] for row in rows]
            runs = await jobs.newest_runs(fetch, ids, max(LAST_RUNS, USUAL_RUNS))
            active = await jobs.active_counts(fetch, ids)
        found = []
        for job_id, title, source, parent_title, count, failed in rows:
            succeeded, failures = runs[job_id]
            newest = sorted(
                [(run, False) for run in succeeded] + [(run, True) for run in failures],
                key=lambda item: item[0][1],
                reverse=True,
            )[:LAST_RUNS]
            found.append(
                Job(
                    title=title,
                    source=source,
                    parent_title=parent_title,
                    runs=int(count),
                    failed=int(failed),
                    active=active.get(job_id, 0),
                    usual=usual([_seconds(run) for run in succeeded]),
                    last=[Run(format_ts(run[1]), _seconds(run), bad) for run, bad in newest],
                )
            )
        return found


def _seconds(run: tuple[int, int]) -> float:
    """A run's length in seconds, to the microsecond: (created_at_us, finished_at_us)."""
    return max(0.0, round((run[1] - run[0]) / 1e6, 6))  # a clock that went back: 0

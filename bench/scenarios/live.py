"""What live messages cost a report: the same PUT on two fresh embedded servers (rate
limits off), one whose pool's space has a live channel (ntfy, to the harness's receiver on
127.0.0.1), measured alternately (`paired`); then one task of it reported as fast as wrk
can, its `current` moving each time, and the sends its message made counted (edits
per minute); and its target."""

from __future__ import annotations

import asyncio

import httpx

from .. import seed
from ..load import Load
from ..measure import Harness
from ..processes import ServerProcess
from ..receiver import Receiver
from ..report import Row, Target
from .paired import paired, paired_target

LIVE_ROWS = ["put_live", "put_quiet", "put_live_hot"]
LIVE_MESSAGES_TARGET = "live messages: keeping them up to date costs a report little"
RATIO = 1.05  # a report's CPU with a live channel against without, at most
# Both servers: channels may reach the receiver on 127.0.0.1.
PRIVATE = {"HEADWAY_WEBHOOK_ALLOW_PRIVATE": "true"}
# The hot task's reports: `current` moves each time (see bench/lua/spread.lua's `{n}`).
MOVING_BODY = '{"current":{n},"end":1000000000,"values":{"log":"x"}}'


def live_cost(bench: Harness) -> None:
    receiver = Receiver()
    bench.cleanups.append(receiver.stop)
    try:

        def channel(server: ServerProcess, tasks: list[str]) -> None:
            asyncio.run(_live_channel(server, tasks[0], receiver))

        def hot(servers: dict[str, ServerProcess], paths: dict[str, list[str]]) -> None:
            # Long enough to see the edit interval (15 s) at work, but in smoke mode.
            seconds = bench.o.duration if bench.o.mode == "smoke" else max(bench.o.duration, 30.0)
            before = len(receiver.received())
            row = bench.measure(
                servers["put_live"],
                "put_live_hot",
                Load("PUT", paths["put_live"][:1], MOVING_BODY),
                duration=seconds,
            )
            edits = len(receiver.received()) - before
            took = row.duration_s or seconds
            row.extra["sends"] = edits
            row.extra["sends_per_minute"] = round(edits * 60 / took, 1)
            row.extra["note"] = (
                f"one task reported {row.requests_per_s or 0:,.0f} times a second, its "
                f"`current` moving each time: its live message sent {edits} times in {took:g} s"
            )
            bench.say(f"put_live_hot: {row.extra['note']}")

        paired(
            bench,
            ("put_live", "put_quiet"),
            {"put_live": PRIVATE, "put_quiet": PRIVATE},
            prepare={"put_live": channel},
            after=hot,
        )
        live = bench.rows["put_live"]
        live.extra["live_sends"] = len(receiver.received())
    finally:
        receiver.stop()
        bench.cleanups.remove(receiver.stop)


async def _live_channel(server: ServerProcess, task: str, receiver: Receiver) -> None:
    """A live ntfy channel on the space of `task` (the pool's), to the receiver."""
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        space = (await client.get(f"/tasks/{task}")).json()["space_uuid"]
        body = {"url": f"ntfy://127.0.0.1:{receiver.port}/bench", "live": True}
        answer = await client.post(f"/spaces/{space}/channels", json=body)
        if answer.status_code != 201:
            raise seed.SeedError(f"the live channel was refused: {answer.text}")


def live_targets(rows: dict[str, Row]) -> list[Target]:
    """A report in a space with a live channel costs at most RATIO times one without."""
    return [
        paired_target(
            rows,
            ("put_live", "put_quiet"),
            target="live_cpu",
            description=f"PUT /tasks/{{t}} with a live channel: CPU/req ≤ {RATIO}x of none",
            group=LIVE_MESSAGES_TARGET,
            most=RATIO,
        )
    ]

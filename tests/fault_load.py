"""What a fault run drives and records: every answer of a steady load on several
instances (`Recorder`), the load itself (`Load`), and live streams followed the way a
browser follows them (`StreamTrack`), each holding the state its events have shown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse

# Pause between one instance's requests: a few requests a second each.
PACE_S = 0.15
# How long a stream that was ended, or could not be opened, waits before it opens again.
REOPEN_S = 0.5
# Reports count to this `end`; a report below it finishes nothing.
END = 10


@dataclass(frozen=True)
class Answer:
    """One request's outcome: its status, or None when no answer arrived (`error` then
    names why, and `sent` tells whether the request may have reached the server)."""

    at: float  # time.monotonic() when the answer (or the failure) came
    instance: str
    op: str
    status: int | None
    body: Any = None
    retry_after: str | None = None
    error: str = ""
    sent: bool = True


@dataclass(frozen=True)
class Fault:
    """A fault and its times: when it began, and when its server answered again."""

    name: str
    started: float
    ended: float


@dataclass
class Recorder:
    answers: list[Answer] = field(default_factory=list)

    def note(self, instance: str, op: str, response: httpx.Response, read: bool = True) -> Answer:
        """Record an answer; its body too, if `read` (a stream's is its events)."""
        body = None
        if read:
            try:
                body = response.json()
            except ValueError:
                body = response.text
        answer = Answer(
            time.monotonic(),
            instance,
            op,
            response.status_code,
            body,
            response.headers.get("retry-after"),
        )
        self.answers.append(answer)
        return answer

    def failed(self, instance: str, op: str, exc: httpx.TransportError) -> Answer:
        # A connection never made carried no request; any other failure may have.
        sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        answer = Answer(
            time.monotonic(), instance, op, None, error=f"{type(exc).__name__}: {exc}", sent=sent
        )
        self.answers.append(answer)
        return answer

    async def call(
        self, client: httpx.AsyncClient, instance: str, op: str, method: str, path: str, **kw: Any
    ) -> Answer:
        try:
            response = await client.request(method, path, **kw)
        except httpx.TransportError as exc:
            return self.failed(instance, op, exc)
        return self.note(instance, op, response)


class Load:
    """Creates (top-level tasks and children), reports, finishing reports, task and
    space reads, spread over the instances that `run` on it until `stop` is set, on
    one shared set of tasks. Notes what was acknowledged: creates (201) and finishes
    (200 with `finished_at`), and how many creates got no answer."""

    def __init__(self, recorder: Recorder, space: str, seed: int = 7) -> None:
        self.recorder = recorder
        self.space = space
        self.rng = random.Random(seed)
        self.stop = asyncio.Event()
        self.tops: list[str] = []
        self.children: list[str] = []
        self.created: set[str] = set()
        self.finished: set[str] = set()
        self.unanswered_creates = 0
        self.last_write = 0.0

    async def run(self, client: httpx.AsyncClient, instance: str) -> None:
        steps = itertools.cycle(
            (
                self.create_top,
                self.report,
                self.create_child,
                self.read_task,
                self.finish,
                self.report,
                self.read_space,
            )
        )
        while not self.stop.is_set():
            await next(steps)(client, instance)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), PACE_S)

    async def create(
        self, client: httpx.AsyncClient, instance: str, op: str, body: dict[str, Any]
    ) -> str | None:
        """A create through `client`: the new task's uuid once acknowledged, else None."""
        path = f"/spaces/{self.space}/tasks"
        answer = await self.recorder.call(client, instance, op, "POST", path, json=body)
        self.last_write = max(self.last_write, answer.at)
        if answer.status == 201:
            self.created.add(answer.body["uuid"])
            return answer.body["uuid"]
        if answer.status is None and answer.sent:
            self.unanswered_creates += 1
        return None

    async def put(
        self, client: httpx.AsyncClient, instance: str, op: str, task: str, body: Any
    ) -> Answer:
        answer = await self.recorder.call(client, instance, op, "PUT", f"/tasks/{task}", json=body)
        self.last_write = max(self.last_write, answer.at)
        if answer.status == 200 and answer.body["finished_at"] is not None:
            self.finished.add(task)
        return answer

    def _open(self, tasks: list[str]) -> list[str]:
        return [task for task in tasks if task not in self.finished]

    async def create_top(self, client: httpx.AsyncClient, instance: str) -> None:
        body = {"title": f"top {len(self.tops)} via {instance}", "source": "fault run"}
        uuid = await self.create(client, instance, "create", body)
        if uuid is not None:
            self.tops.append(uuid)

    async def create_child(self, client: httpx.AsyncClient, instance: str) -> None:
        if not self.tops:
            return await self.create_top(client, instance)
        body = {"title": f"step via {instance}", "parent_uuid": self.rng.choice(self.tops)}
        uuid = await self.create(client, instance, "create child", body)
        if uuid is not None:
            self.children.append(uuid)

    async def report(self, client: httpx.AsyncClient, instance: str) -> None:
        candidates = self._open(self.tops + self.children)
        if candidates:
            current = self.rng.randrange(END)
            body = {"current": current, "end": END, "values": {"log": f"at {current}"}}
            await self.put(client, instance, "report", self.rng.choice(candidates), body)

    async def finish(self, client: httpx.AsyncClient, instance: str) -> None:
        """Finish an open step, else an open top-level task: by `done`, or by reaching
        `end`, in turn."""
        candidates = self._open(self.children) or self._open(self.tops)
        if candidates:
            body = self.rng.choice(({"done": True}, {"current": END, "end": END}))
            await self.put(client, instance, "finish", self.rng.choice(candidates), body)

    async def read_task(self, client: httpx.AsyncClient, instance: str) -> None:
        known = self.tops + self.children
        if known:
            path = f"/tasks/{self.rng.choice(known)}"
            await self.recorder.call(client, instance, "read task", "GET", path)

    async def read_space(self, client: httpx.AsyncClient, instance: str) -> None:
        path = f"/spaces/{self.space}"
        await self.recorder.call(client, instance, "read space", "GET", path, params={"limit": 10})


def flattened(space: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every task of a space read (or snapshot) by uuid, each as its own event shows it:
    a parent with `children: []`, its children beside it."""
    tasks: dict[str, dict[str, Any]] = {}
    for top in space["tasks"]:
        for child in top["children"]:
            tasks[child["uuid"]] = child
        tasks[top["uuid"]] = {**top, "children": []}
    return tasks


class StreamTrack:
    """A live stream of a space on one instance, read in the background: a snapshot
    replaces all it held, a task event replaces that task. Ended by the server or cut
    off, it opens again after REOPEN_S, as a browser does; each opening's answer is
    recorded like any other."""

    def __init__(
        self, client: httpx.AsyncClient, instance: str, space: str, recorder: Recorder
    ) -> None:
        self.client = client
        self.instance = instance
        self.path = f"/spaces/{space}/events"
        self.recorder = recorder
        self.tasks: dict[str, dict[str, Any]] = {}
        self.changed_at = time.monotonic()  # when `tasks` last changed
        self.openings = 0
        self.endings: list[str] = []
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        while True:
            opened = False
            try:
                async with aconnect_sse(self.client, "GET", self.path) as source:
                    response = source.response
                    opened = response.status_code == 200
                    if not opened:
                        await response.aread()
                    self.recorder.note(self.instance, "stream", response, read=not opened)
                    if opened:
                        self.openings += 1
                        async for event in source.aiter_sse():
                            self.apply(event)
                        self.endings.append("ended by the server")
            except httpx.TransportError as exc:
                if opened:  # cut off: no answer of its own, the opening was one
                    self.endings.append(f"cut off: {type(exc).__name__}")
                else:
                    self.recorder.failed(self.instance, "stream", exc)
            await asyncio.sleep(REOPEN_S)

    def apply(self, event: ServerSentEvent) -> None:
        if event.event == "snapshot":
            tasks = flattened(json.loads(event.data))
        elif event.event == "task":
            task = json.loads(event.data)
            tasks = {**self.tasks, task["uuid"]: task}
        else:
            return
        if tasks != self.tasks:
            self.tasks = tasks
            self.changed_at = time.monotonic()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

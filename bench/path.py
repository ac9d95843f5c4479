"""The files of `headway/` one report (`PUT /tasks/{t}`) and one create
(`POST /spaces/{s}/tasks`) pass through, and the calls made in them, on the embedded
default after a warm-up: how far a request travels, which a layout change should not
lengthen. `python -m bench.path` prints one line for each, then the files.

Counted by a profile hook (`sys.setprofile`) over the one request, in this thread: a
background loop that runs meanwhile counts too, so figures move by a file or two."""

from __future__ import annotations

import asyncio
import collections
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

import headway
from headway.app import create_app
from headway.config import Settings

PACKAGE = Path(headway.__file__).parent


async def _traced(call: Callable[[], Awaitable[httpx.Response]]) -> collections.Counter[str]:
    """Calls made in each file of the package while `call` runs."""
    files: collections.Counter[str] = collections.Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(str(PACKAGE)):
            files[Path(frame.f_code.co_filename).relative_to(PACKAGE).as_posix()] += 1

    sys.setprofile(hook)
    try:
        response = await call()
    finally:
        sys.setprofile(None)
    response.raise_for_status()
    return files


async def paths() -> dict[str, collections.Counter[str]]:
    """The files a report and a create pass through, with their calls."""
    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(database_url=f"sqlite:///{directory}/headway.db", run_worker=False)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as c:
                space = (await c.post("/spaces", json={})).json()["uuid"]
                tasks = [
                    (await c.post(f"/spaces/{space}/tasks", json={})).json()["uuid"]
                    for _ in range(3)
                ]
                for task in tasks:  # the warm-up: caches filled, first imports done
                    await c.put(f"/tasks/{task}", json={"current": 1, "end": 10})
                body = {"current": 2, "end": 10}
                return {
                    "report": await _traced(lambda: c.put(f"/tasks/{tasks[0]}", json=body)),
                    "create": await _traced(lambda: c.post(f"/spaces/{space}/tasks", json={})),
                }


def main() -> None:
    for name, files in asyncio.run(paths()).items():
        print(f"{name}: {len(files)} files, {sum(files.values())} calls")
        print("  " + " ".join(sorted(files)))


if __name__ == "__main__":
    main()

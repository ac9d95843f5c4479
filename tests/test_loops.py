"""A background loop is stopped however many cancellations it takes (`headway.background.loops`)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from headway.background.loops import stop


async def test_a_loop_that_lost_a_cancellation_is_stopped_all_the_same():
    """On Python 3.11, `asyncio.wait_for` (redis-py's, as it sends) can return a result
    instead of the cancellation that came with it: the loop goes on, as this one does
    once. A shutdown that cancelled it once would then wait for it forever."""
    turns = 0

    async def loop() -> None:
        nonlocal turns
        while True:
            turns += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if turns == 1:
                    continue  # lost, as wait_for loses it
                raise

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    async with asyncio.timeout(10):
        await stop(task, None)
    assert task.cancelled() and turns == 2


async def test_a_loop_that_failed_has_its_error_logged(caplog: pytest.LogCaptureFixture):
    async def failing() -> None:
        raise RuntimeError("the loop's own fault")

    task = asyncio.create_task(failing(), name="headway-example")
    await asyncio.sleep(0)
    with caplog.at_level(logging.ERROR, logger="headway"):
        await stop(task)
    assert "headway-example ended with an error" in caplog.text
    assert "the loop's own fault" in caplog.text

"""Stopping background tasks: every task ends, a real error is not hidden."""

from __future__ import annotations

import asyncio

import pytest

from tidemq.net.tasks import cancel_and_wait


async def test_every_task_is_cancelled_and_has_ended_on_return() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    tasks = [asyncio.create_task(forever()) for _ in range(3)]
    await started.wait()
    await cancel_and_wait(tasks[0], None, *tasks[1:])
    assert all(task.cancelled() for task in tasks)


async def test_a_task_that_failed_raises_its_error() -> None:
    async def fails() -> None:
        raise ValueError("broken")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="broken"):
        await cancel_and_wait(task)


async def test_nothing_to_stop() -> None:
    await cancel_and_wait()
    await cancel_and_wait(None)

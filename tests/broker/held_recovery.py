"""A broker started with its store recovery held open, for tests of what a starting broker
does before it is ready (fault injection: the store's ``start`` waits for the test)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tidemq.broker.app import BrokerApp


@contextlib.asynccontextmanager
async def recovery_held(app: BrokerApp, monkeypatch: pytest.MonkeyPatch,
                        ) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Start ``app`` and enter once its store recovery is under way, held open. The
    function given lets recovery finish and waits for the start to end; leaving the block
    does the same (so a failing test does not leave the start hanging)."""
    recovering, go_on = threading.Event(), threading.Event()
    start_store = app.store.start

    def slow_start() -> object:
        recovering.set()
        go_on.wait(30)
        return start_store()

    monkeypatch.setattr(app.store, "start", slow_start)
    starting = asyncio.ensure_future(app.start())

    async def release() -> None:
        go_on.set()
        await asyncio.wait_for(starting, 30)

    try:
        assert await asyncio.to_thread(recovering.wait, 30)
        yield release
    finally:
        await release()

"""LoopThread: an asyncio event loop on a thread of its own, for blocking wrappers of the
asyncio clients (a client that must also answer the broker's requests, such as a
transactional producer's check-backs, needs a loop reading its connections all along).

:meth:`LoopThread.run` runs a coroutine there and blocks the calling thread until it
ends, returning its result or raising its exception. Calling it from the loop's own
thread would wait for itself: that raises :class:`RuntimeError` instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """An event loop running on a daemon thread named ``name`` from construction until
    :meth:`close`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop; block until it ends."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking call from the client's own event loop thread "
                               "would wait for itself")
        if self.loop.is_closed():
            coro.close()
            raise RuntimeError("the client's event loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Cancel what still runs on the loop, stop it, wait for its thread and close it
        (idempotent)."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _cancel_the_rest() -> None:
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()

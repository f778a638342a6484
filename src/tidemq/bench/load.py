"""What a bench's load tasks (senders, receivers) share: what counts as acknowledged,
and their end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from tidemq.bench.process import BenchError
from tidemq.errors import TideMQError
from tidemq.types import SendResult, SendStatus

__all__ = ["acknowledged", "join_load"]


def acknowledged(result: SendResult) -> None:
    """A send answered with anything but SEND_OK (a flush or replica timeout, no replica
    in sync) is stored, not acknowledged: it counts as an error, not as throughput."""
    if result.status is not SendStatus.SEND_OK:
        raise TideMQError(f"send answered {result.status.name}")


async def join_load(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Wait for load tasks already told to stop. The tasks count the errors they expect
    (a refused send); one that died of any other error fails the bench with it, instead
    of leaving a figure that reads as a slow broker."""
    tasks = list(tasks)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    died = [r for r in results
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    if died:
        raise BenchError(f"{len(died)} of {len(tasks)} load tasks died; the first: "
                         f"{died[0]!r}") from died[0]

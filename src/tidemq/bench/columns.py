"""How the benchmarks read through ``PullConsumer.poll_batches``: every body of every
batch is taken (``MessageBatch.bodies``, the cut a reader needs before it can use one)
and its bytes are summed, so a columnar row does the work a real reader would."""

from __future__ import annotations

from tidemq.client import PullConsumer

__all__ = ["take_columns"]


async def take_columns(consumer: PullConsumer, *, timeout: float,
                       limit: int) -> tuple[int, int]:
    """One ``poll_batches`` of up to ``limit`` messages: how many came, and their body
    bytes."""
    msgs = nbytes = 0
    for batch in await consumer.poll_batches(timeout=timeout, max_messages=limit):
        bodies = batch.bodies
        msgs += len(bodies)
        nbytes += sum(map(len, bodies))
    return msgs, nbytes

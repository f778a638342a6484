"""A push consumer's listener for tests: the bodies it got, in arrival order, and an
event set once as many as expected have arrived."""

from __future__ import annotations

import asyncio

from tidemq.client import ConsumeStatus
from tidemq.types import MessageExt


class Received:
    """Pass :meth:`listener` to a :class:`~tidemq.client.PushConsumer`; await
    ``all_in`` for ``expected`` messages."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.bodies: list[bytes] = []
        self.all_in = asyncio.Event()

    async def listener(self, msgs: list[MessageExt]) -> ConsumeStatus:
        self.bodies.extend(bytes(m.body) for m in msgs)
        if len(self.bodies) >= self.expected:
            self.all_in.set()
        return ConsumeStatus.CONSUME_SUCCESS

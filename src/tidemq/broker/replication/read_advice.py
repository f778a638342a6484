"""Which member of the group a consumer should pull from next (``suggestWhichBrokerId``).

RocketMQ's rule, with ``slaveReadEnable``: a pull whose first record lies further behind
the end of the commit log than ``accessMessageInMemoryMaxRatio`` % of the machine's
memory reads from disk rather than from the page cache, and is sent to the group's
``whichBrokerWhenConsumeSlowly`` (a replica, 1 by default); any other pull is sent to
the group's ``brokerId`` (0, the master, by default). Without ``slaveReadEnable`` every
answer suggests the master.
"""

from __future__ import annotations

import os
import struct

from tidemq.broker.context import BrokerContext
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.formats.record import OFF_PHYSICAL_OFFSET
from tidemq.store.reader import GetResult

__all__ = ["ReadAdvice", "physical_memory"]

_PHYS = struct.Struct(">q")


def physical_memory() -> int:
    """The machine's memory in bytes (0 when the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class ReadAdvice:
    def __init__(self, ctx: BrokerContext, memory: int | None = None) -> None:
        self.ctx = ctx
        total = physical_memory() if memory is None else memory
        self.in_memory = total * ctx.config.access_message_in_memory_max_ratio // 100

    def __call__(self, h: PullMessageRequestHeader, res: GetResult) -> str:
        group = self.ctx.subscription_groups.groups.get(h.consumer_group) or {}
        if res.buffers and len(res.buffers[0]) >= OFF_PHYSICAL_OFFSET + 8:
            first = _PHYS.unpack_from(res.buffers[0], OFF_PHYSICAL_OFFSET)[0]
            if self.ctx.store.commitlog.max_offset - first > self.in_memory:
                return str(group.get("whichBrokerWhenConsumeSlowly", 1))
        return str(group.get("brokerId", 0))

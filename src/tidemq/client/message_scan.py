"""Reading the messages of a queue between two store times, as mqadmin's ``printMsg`` and
``printMsgByQueue`` do (without a consumer group and without committing anything).

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`queue_range`              31 GET_MIN_OFFSET / 30 GET_MAX_OFFSET, or 29
                                 SEARCH_OFFSET_BY_TIMESTAMP for a begin or end time
:func:`scan_queue`               11 PULL_MESSAGE from the range's start to its end, in
                                 pulls of up to 32 messages, filtered by a tag expression
===============================  ==========================================================
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from tidemq.client import offsets as ofs
from tidemq.client.lmq import is_lmq, lmq_offsets
from tidemq.client.pull import pull_request, read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.types import MessageExt, MessageQueue, PullStatus

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["SCAN_GROUP", "queue_range", "scan_queue"]

#: The group the scans pull as (nothing is committed for it).
SCAN_GROUP = "TOOLS_CONSUMER"
_PULL_NUMS = 32


async def queue_range(admin: AdminClient, queue: MessageQueue, begin_ms: int | None,
                      end_ms: int | None) -> tuple[int, int]:
    """``[start, end)`` offsets of ``queue`` holding the messages stored from ``begin_ms``
    to ``end_ms`` (``None``: the queue's first / last)."""
    addr = await admin.instance.master_address(queue)
    lo = ofs.read_offset(await admin.request(addr, ofs.min_offset_request(queue)),
                         address=addr)
    hi = ofs.read_offset(await admin.request(addr, ofs.max_offset_request(queue)),
                         address=addr)
    start, end = lo, hi
    if begin_ms is not None and hi > lo:
        start = ofs.read_offset(await admin.request(
            addr, ofs.search_offset_request(queue, begin_ms)), address=addr)
    if end_ms is not None and hi > lo:
        last = ofs.read_offset(await admin.request(
            addr, ofs.search_offset_request(queue, end_ms, upper=True)), address=addr)
        # With nothing stored by end_ms the search answers the queue's first offset.
        end = last + 1 if (await admin.message_at(queue, last)).store_timestamp <= end_ms \
            else last
    return max(start, lo), min(max(end, start), hi)


async def scan_queue(admin: AdminClient, queue: MessageQueue, start: int, end: int,
                     expression: str = "*", *, address: str | None = None
                     ) -> AsyncIterator[list[MessageExt]]:
    """The messages of ``queue`` at offsets ``[start, end)`` that match ``expression``
    (a tag expression, ``TagA || TagB``), a pull's worth at a time, from the broker at
    ``address`` (default: the queue's master as its topic's route names it)."""
    addr = address or await admin.instance.master_address(queue)
    sub = Subscription.parse(queue.topic, expression)
    offset = start
    while offset < end:
        cmd = pull_request(SCAN_GROUP, queue, offset, max_nums=min(_PULL_NUMS, end - offset),
                           subscription=sub)
        result = read_pull_response(await admin.instance.request(addr, cmd), queue, sub,
                                    address=addr, offset=offset)
        if result.status is PullStatus.FOUND:
            found = [m for m in result.messages if _offset_in(queue, m) < end]
            if found:
                yield found
        elif result.status is PullStatus.NO_NEW_MSG:
            return
        if result.next_offset <= offset:
            return
        offset = result.next_offset


def _offset_in(queue: MessageQueue, msg: MessageExt) -> int:
    """``msg``'s offset in ``queue``: an LMQ's is among the record's LMQ offsets (its own
    ``queue_offset`` is that of the parent queue it was sent to)."""
    if is_lmq(queue.topic):
        return lmq_offsets(msg).get(queue.topic, msg.queue_offset)
    return msg.queue_offset

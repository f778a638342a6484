"""What a master serves its replicas besides the log: the slave-synchronisation reads.

GET_ALL_CONSUMER_OFFSET (43) and GET_ALL_DELAY_OFFSET (45), with RocketMQ's bodies
(``{"offsetTable": {"topic@group": {"0": 42}}}`` and ``{"offsetTable": {"1": 7}}``, the
level as text; TideMQ adds ``"timerCheckpoint": {"enqueueOffset", "frontierMs",
"scanOffset"}``, the timer messages' progress, which Java replicas ignore), and TideMQ's
GET_LMQ_METADATA (20201): the light message queues' consumer offsets or tombstones, a
page at a time, as there may be millions of them --
ext ``kind`` (``offsets`` or ``tombstones``), ``afterLmq`` and, for offsets,
``afterGroup`` (the last row of the previous page; absent: from the first) and
``maxCount`` (at most :data:`MAX_LMQ_ROWS`); body ``{"rows": [[lmq, group, offset],
...]}`` or ``{"rows": [[lmq, floor], ...]}``, ``"more": true`` when the page is full.
TideMQ's GET_DELETED_TOPICS (20202): the store's topic-deletion marks, ``{"topics":
{"<topic>": <offset>}}`` (the log offset each deletion began at), which a replica takes
so as to delete each topic where its master did.
Topic configs (GET_ALL_TOPIC_CONFIG, 21) and subscription groups
(GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201) are served by the admin and group processors.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tidemq.broker.context import BrokerContext
from tidemq.broker.offset_json import COMPACT
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["MAX_LMQ_ROWS", "SlaveSyncProcessor"]

#: The most rows one GET_LMQ_METADATA answer holds.
MAX_LMQ_ROWS = 10_000


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class SlaveSyncProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_offsets)
        reg(RequestCode.GET_ALL_DELAY_OFFSET, self.delay_offsets)
        reg(RequestCode.GET_LMQ_METADATA, self.lmq_metadata)
        reg(RequestCode.GET_DELETED_TOPICS, self.deleted_topics)

    async def all_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Encoded on a thread, a slice at a time: millions of offsets take a while, and
        the loop serves on meanwhile. The parts go to the transport as they are."""
        parts = await asyncio.to_thread(self.ctx.offsets.json_parts, COMPACT)
        resp = cmd.response()
        resp.body_parts = parts
        return resp

    def lmq_metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        lmq = self.ctx.store.lmq
        if lmq is None:
            raise error_for_code(ResponseCode.SERVICE_NOT_AVAILABLE,
                                 "LMQ is disabled on this broker (enableLmq/enableMultiDispatch)")
        ext = cmd.ext_fields
        kind = ext.get("kind", "")
        try:
            limit = int(ext.get("maxCount", MAX_LMQ_ROWS))
        except ValueError:
            limit = -1
        if not 0 < limit <= MAX_LMQ_ROWS:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"maxCount must be 1..{MAX_LMQ_ROWS}, not "
                                 f"{ext.get('maxCount')!r}")
        after = ext.get("afterLmq")
        rows: list[Any]
        if kind == "offsets":
            group = ext.get("afterGroup")
            if (after is None) != (group is None):
                raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                     "afterLmq and afterGroup go together")
            rows = lmq.offsets_after(None if after is None or group is None
                                     else (after, group), limit)
        elif kind == "tombstones":
            rows = lmq.tombstones_after(after, limit)
        else:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"kind must be offsets or tombstones, not {kind!r}")
        return cmd.response(body=_json({"rows": rows, "more": len(rows) == limit}))

    def deleted_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=_json({"topics": self.ctx.store.topic_deletion_marks()}))

    def delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        schedule = self.ctx.schedule
        table = {str(level): o for level, o in schedule.offsets.copy().items()}
        return cmd.response(body=_json({"offsetTable": table,
                                        "timerCheckpoint": schedule.timer_progress().to_json()}))

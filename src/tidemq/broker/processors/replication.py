"""What a master serves its replicas besides the log: the slave-synchronisation reads.

GET_ALL_CONSUMER_OFFSET (43) and GET_ALL_DELAY_OFFSET (45), with RocketMQ's bodies
(``{"offsetTable": {"topic@group": {"0": 42}}}`` and ``{"offsetTable": {"1": 7}}``, the
level as text). Topic configs (GET_ALL_TOPIC_CONFIG, 21) and subscription groups
(GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201) are served by the admin and group processors.
"""

from __future__ import annotations

import json
from typing import Any

from tidemq.broker.context import BrokerContext
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.net import Connection

__all__ = ["SlaveSyncProcessor"]


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class SlaveSyncProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_offsets)
        reg(RequestCode.GET_ALL_DELAY_OFFSET, self.delay_offsets)

    def all_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        table = {key: {str(q): o for q, o in queues.copy().items()}
                 for key, queues in self.ctx.offsets.table.copy().items()}
        return cmd.response(body=_json({"offsetTable": table}))

    def delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        table = {str(level): o for level, o in self.ctx.schedule.offsets.copy().items()}
        return cmd.response(body=_json({"offsetTable": table}))

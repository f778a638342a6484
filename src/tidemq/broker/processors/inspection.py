"""Read-only views an operator asks for (mqadmin's ``getConsumerConfig``, ``queryCq``,
``producer`` and ``haStatus``), in upstream's codes and body shapes:

==================================  ==================================================
request                             answer body
==================================  ==================================================
352 GET_SUBSCRIPTIONGROUP_CONFIG    one SubscriptionGroupConfig (ext ``group``);
                                    SUBSCRIPTION_GROUP_NOT_EXIST when the broker has none
321 QUERY_CONSUME_QUEUE             QueryConsumeQueueResponseBody: ``count`` entries of
                                    one queue from ``index``, with the queue's bounds
328 GET_ALL_PRODUCER_INFO           ProducerTableInfo: ``{"data": {group: [ProducerInfo]}}``
907 GET_BROKER_HA_STATUS            HARuntimeInfo: a master's replicas, or a replica's link
==================================  ==================================================

``transferredByteInSecond`` is the bytes of the last whole second on the link (0 once
it has been idle a second). Upstream's ``masterFlushOffset`` is not a live offset: it is
the end of the master's commit log when that master started, which an upstream replica
asks for (EXCHANGE_BROKER_HA_INFO, with ``syncMasterFlushOffsetWhenStartup``) and keeps
in its checkpoint, or ``resetMasterFlushOffset`` sets. TideMQ has no such request (its
checkpoint only keeps a value an upstream broker left there), so a TideMQ replica cannot
know it and reports :data:`UNKNOWN` (-1, upstream's own value for "not set"), never 0,
which would read as an offset.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import parse_header
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import QueryConsumeQueueRequestHeader
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["MAX_CQ_ENTRIES", "UNKNOWN", "InspectionProcessor"]

#: The most consume-queue entries one QUERY_CONSUME_QUEUE answers.
MAX_CQ_ENTRIES = 1000
#: A replica's ``masterFlushOffset``, which it cannot know (see the module doc).
UNKNOWN = -1


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _epoch_ms(monotonic_at: float) -> int:
    """A ``time.monotonic()`` reading as epoch milliseconds (0: never)."""
    if monotonic_at <= 0:
        return 0
    return int((time.time() - (time.monotonic() - monotonic_at)) * 1000)


class InspectionProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, self.group_config)
        reg(RequestCode.QUERY_CONSUME_QUEUE, self.query_consume_queue)
        reg(RequestCode.GET_ALL_PRODUCER_INFO, self.producers)
        reg(RequestCode.GET_BROKER_HA_STATUS, self.ha_status)

    def group_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("group", "")
        cfg = self.ctx.subscription_groups.groups.get(group)
        if cfg is None:
            raise error_for_code(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                 f"No group {group} in this broker")
        return cmd.response(body=_json(cfg))

    def query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = parse_header(QueryConsumeQueueRequestHeader, cmd)
        topic, queue_id, index = h.topic, h.queue_id, h.index
        count = min(max(h.count, 0), MAX_CQ_ENTRIES)
        queue = self.ctx.store.queues.get(topic, queue_id)
        if queue is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"{queue_id}@{topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": queue.max_offset,
                                "minQueueIndex": queue.min_offset}
        group = h.consumer_group
        if group:
            expr = self.ctx.consumers.subscription(group, topic)
            if expr is None:
                body["filterData"] = f"{group}@{topic} is not online!"
            else:
                body["subscriptionData"] = {"topic": topic, "subString": expr}
        rows = []
        for offset in range(index, index + count):
            entry = queue.entry(offset)
            if entry is None:
                break
            phys, size, tags = entry
            rows.append({"physicOffset": phys, "physicSize": size, "tagsCode": tags,
                         "eval": False})
        body["queueData"] = rows
        return cmd.response(body=_json(body))

    def producers(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = {group: [{"clientId": ch.client_id, "remoteIP": ch.conn.remote_address,
                         "language": ch.language, "version": ch.version,
                         "lastUpdateTimestamp": _epoch_ms(ch.last_update)}
                        for ch in members.values()]
                for group, members in sorted(self.ctx.producers.groups.items())}
        return cmd.response(body=_json({"data": data}))

    def ha_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        replication = self.ctx.replication
        end = self.ctx.store.commitlog.max_offset
        now = time.monotonic()
        info: dict[str, Any] = {"master": replication.role.is_master,
                                "masterCommitLogMaxOffset": end, "inSyncSlaveNums": 0,
                                "haConnectionInfo": [], "haClientRuntimeInfo": {}}
        server = replication.server
        if server is not None:
            info["inSyncSlaveNums"] = server.in_sync()
            info["haConnectionInfo"] = [
                {"addr": link.address, "slaveAckOffset": link.acked,
                 "diff": max(0, end - link.acked),
                 "inSync": end - link.acked <= server.max_gap,
                 "transferredByteInSecond": link.rate.per_second(now),
                 "transferFromWhere": link.transfer_from,
                 # TideMQ: whether it signed in (docs/security.md), and as whom
                 "authenticated": link.authenticated, "accessKey": link.access_key}
                for link in server.links if link.acked >= 0]
        client = replication.client
        if client is not None:
            info["haClientRuntimeInfo"] = {
                "masterAddr": client.master_address,
                "transferredByteInSecond": client.rate.per_second(now),
                "maxOffset": end, "lastReadTimestamp": _epoch_ms(client.last_frame),
                "lastWriteTimestamp": _epoch_ms(client.last_report),
                "masterFlushOffset": UNKNOWN,
                "isActivated": client.connected.is_set()}
        return cmd.response(body=_json(info))

"""What a consumer answers to GET_CONSUMER_RUNNING_INFO (307), which a broker passes on
from ``mqadmin consumerStatus``: upstream's ``ConsumerRunningInfo`` members
``properties``, ``subscriptionSet`` and ``mqTable`` (here a JSON list of rows, one per
queue the consumer holds, instead of fastjson's map keyed by queue objects;
docs/protocol.md), and an empty ``jstack`` (there is no Java stack to dump).

A consumer role that can say more about its queues offers ``running_queues()``
(:class:`QueueReporter`); the rows then carry its positions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from tidemq.codec.bodies import ConsumerData
from tidemq.codec.command import TIDEMQ_VERSION

__all__ = ["QueueReporter", "encode_running_info"]


@runtime_checkable
class QueueReporter(Protocol):
    """A consumer that reports its queues: one dict per queue with ``topic``,
    ``brokerName``, ``queueId`` and what it knows of it (``commitOffset``,
    ``cachedMsgCount`` ...)."""

    def running_queues(self) -> Sequence[dict[str, Any]]: ...


def encode_running_info(data: ConsumerData, member: object, *, namesrv: Sequence[str],
                        started_ms: int) -> bytes:
    """The body answered for consumer ``member`` (whose heartbeat data is ``data``)."""
    queues = list(member.running_queues()) if isinstance(member, QueueReporter) else []
    body = {
        "properties": {
            "PROP_NAMESERVER_ADDR": ";".join(namesrv),
            "PROP_CONSUME_TYPE": str(data.consume_type.value),
            "PROP_CONSUME_ORDERLY": str(bool(getattr(member, "orderly", False))).lower(),
            "PROP_CLIENT_VERSION": str(TIDEMQ_VERSION),
            "PROP_CONSUMER_START_TIMESTAMP": str(started_ms),
            "messageModel": str(data.message_model.value),
            "consumeFromWhere": str(data.consume_from_where.value),
        },
        "subscriptionSet": msgspec.to_builtins(data.subscription_data_set),
        "mqTable": sorted(queues, key=lambda q: (q.get("topic", ""), q.get("brokerName", ""),
                                                q.get("queueId", 0))),
        "jstack": "",
    }
    return json.dumps(body, sort_keys=True).encode()

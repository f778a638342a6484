"""What a consumer answers to GET_CONSUMER_RUNNING_INFO (307), which a broker passes on
from ``mqadmin consumerStatus``: upstream's ``ConsumerRunningInfo`` members
``properties``, ``subscriptionSet`` and ``mqTable`` (here a JSON list of rows, one per
queue the consumer holds, instead of fastjson's map keyed by queue objects;
docs/protocol.md), and ``jstack``: empty, or, when the request's ``jstackEnable`` is
true, what a Python process has in place of a Java thread dump -- the stack of every
thread and of every asyncio task of the consumer's event loop (:func:`stack_dump`).

A consumer role that can say more about its queues offers ``running_queues()``
(:class:`QueueReporter`); the rows then carry its positions.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from tidemq.codec.bodies import ConsumerData
from tidemq.codec.command import TIDEMQ_VERSION

__all__ = ["QueueReporter", "encode_running_info", "stack_dump"]


@runtime_checkable
class QueueReporter(Protocol):
    """A consumer that reports its queues: one dict per queue with ``topic``,
    ``brokerName``, ``queueId`` and what it knows of it (``commitOffset``,
    ``cachedMsgCount`` ...)."""

    def running_queues(self) -> Sequence[dict[str, Any]]: ...


def stack_dump() -> str:
    """Every thread's stack, then every asyncio task's of the running loop (if any)."""
    out = io.StringIO()
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sorted(sys._current_frames().items()):
        out.write(f'"{names.get(ident, "?")}" thread {ident}\n')
        out.write("".join(traceback.format_stack(frame)))
        out.write("\n")
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no running loop
        tasks = set()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f'"{task.get_name()}" task {task.get_coro()!r}\n')
        task.print_stack(file=out)
        out.write("\n")
    return out.getvalue()


def encode_running_info(data: ConsumerData, member: object, *, namesrv: Sequence[str],
                        started_ms: int, jstack: bool = False) -> bytes:
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
        "jstack": stack_dump() if jstack else "",
    }
    return json.dumps(body, sort_keys=True).encode()

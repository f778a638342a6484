"""Offset requests and their answers (remoting.md §2.9), as plain functions.

Each ``*_request`` builds the command; each ``read_*`` checks the response code and
returns the value, raising the :func:`~tidemq.errors.error_for_code` error otherwise.
The async consumer, the admin client and the blocking client all use them.

=====================================  ===========================================
request                                answer
=====================================  ===========================================
14 QUERY_CONSUMER_OFFSET               ext ``offset``; 22 QUERY_NOT_FOUND -> ``None``
15 UPDATE_CONSUMER_OFFSET              no ext
30 GET_MAX_OFFSET / 31 GET_MIN_OFFSET  ext ``offset``
29 SEARCH_OFFSET_BY_TIMESTAMP          ext ``offset``
32 GET_EARLIEST_MSG_STORETIME          ext ``timestamp``
=====================================  ===========================================

Where a consumer starts a queue: it asks the broker with :func:`start_query_request`,
which leaves ``setZeroIfNotFound`` out as RocketMQ's consumers do; the broker answers
the group's committed offset, else 0 when the queue is young (its min offset is 0 and
message 0 is still in memory), else 22 QUERY_NOT_FOUND. So a new group reads a young queue
from its first message whatever its ``ConsumeFromWhere``. Only on 22 does the
``ConsumeFromWhere`` choose (:func:`start_offset_request`, Java
``computePullFromWhere``): ``CONSUME_FROM_LAST_OFFSET`` -> GET_MAX_OFFSET, but offset 0
for a retry topic (``%RETRY%<group>``: its messages are all meant for the group);
``CONSUME_FROM_FIRST_OFFSET`` -> GET_MIN_OFFSET; ``CONSUME_FROM_TIMESTAMP`` ->
SEARCH_OFFSET_BY_TIMESTAMP, but GET_MAX_OFFSET for a retry topic. The deprecated
``CONSUME_FROM_MIN_OFFSET``, ``CONSUME_FROM_MAX_OFFSET`` and
``CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST`` act as LAST, as in RocketMQ's
consumers (a group moving over from Java with one of them starts where it would there).

RESET_CONSUMER_CLIENT_OFFSET (220), broker -> client: ext ``topic``, ``group``,
``timestamp``, ``isForce``; body ``{"offsetTable":[{"topic","brokerName","queueId",
"offset"}, ...]}`` (:func:`read_reset_offsets`).
"""

from __future__ import annotations

import msgspec

from tidemq.client.retry import RETRY_PREFIX
from tidemq.codec.bodies import ConsumeFromWhere
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tidemq.errors import RemoteProtocolError, ResponseCode, error_for_code
from tidemq.types import MessageQueue

__all__ = [
    "check_success",
    "earliest_time_request",
    "max_offset_request",
    "min_offset_request",
    "query_offset_request",
    "read_committed",
    "read_offset",
    "read_reset_offsets",
    "read_timestamp",
    "search_offset_request",
    "start_offset_request",
    "start_query_request",
    "update_offset_request",
]



def check_success(response: RemotingCommand, *, address: str) -> None:
    """Raise the error for ``response``'s code unless it is SUCCESS."""
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=address)


def query_offset_request(group: str, queue: MessageQueue) -> RemotingCommand:
    """What ``group`` committed for ``queue``: ``setZeroIfNotFound=false``, so that a
    group without an offset reads as none."""
    header = QueryConsumerOffsetRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id,
        set_zero_if_not_found=False, broker_name=queue.broker_name,
    )
    return RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())


def start_query_request(group: str, queue: MessageQueue) -> RemotingCommand:
    """Where a consumer of ``group`` resumes ``queue``: the query without
    ``setZeroIfNotFound``, as RocketMQ's consumers send it, so that a group without an
    offset is answered 0 for a young queue (see the module docstring)."""
    header = QueryConsumerOffsetRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id,
        broker_name=queue.broker_name,
    )
    return RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())


def read_committed(response: RemotingCommand, *, address: str) -> int | None:
    """The committed offset, or ``None`` when the group has none for the queue."""
    if response.code == ResponseCode.QUERY_NOT_FOUND:
        return None
    check_success(response, address=address)
    return QueryConsumerOffsetResponseHeader.from_ext(response.ext_fields).offset


def update_offset_request(group: str, queue: MessageQueue, offset: int, *,
                          oneway: bool = False) -> RemotingCommand:
    header = UpdateConsumerOffsetRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id,
        commit_offset=offset, broker_name=queue.broker_name,
    )
    return RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext(),
                                   oneway=oneway)


def max_offset_request(queue: MessageQueue) -> RemotingCommand:
    header = GetMaxOffsetRequestHeader(topic=queue.topic, queue_id=queue.queue_id,
                                       broker_name=queue.broker_name)
    return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.to_ext())


def min_offset_request(queue: MessageQueue) -> RemotingCommand:
    header = GetMinOffsetRequestHeader(topic=queue.topic, queue_id=queue.queue_id,
                                       broker_name=queue.broker_name)
    return RemotingCommand.request(RequestCode.GET_MIN_OFFSET, header.to_ext())


def search_offset_request(queue: MessageQueue, timestamp_ms: int, *,
                          upper: bool = False) -> RemotingCommand:
    """The offset of the first message stored at or after ``timestamp_ms`` (``upper``:
    the last one stored at or before it)."""
    header = SearchOffsetRequestHeader(
        topic=queue.topic, queue_id=queue.queue_id, timestamp=timestamp_ms,
        boundary_type="UPPER" if upper else "LOWER", broker_name=queue.broker_name,
    )
    return RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header.to_ext())


def earliest_time_request(queue: MessageQueue) -> RemotingCommand:
    header = GetEarliestMsgStoretimeRequestHeader(topic=queue.topic, queue_id=queue.queue_id,
                                                  broker_name=queue.broker_name)
    return RemotingCommand.request(RequestCode.GET_EARLIEST_MSG_STORETIME, header.to_ext())


def read_offset(response: RemotingCommand, *, address: str) -> int:
    """The ``offset`` of a 29/30/31 response."""
    check_success(response, address=address)
    return GetMaxOffsetResponseHeader.from_ext(response.ext_fields).offset


def read_timestamp(response: RemotingCommand, *, address: str) -> int:
    """The ``timestamp`` of a 32 response."""
    check_success(response, address=address)
    return GetEarliestMsgStoretimeResponseHeader.from_ext(response.ext_fields).timestamp


def start_offset_request(queue: MessageQueue, consume_from: ConsumeFromWhere,
                         timestamp_ms: int | None = None) -> RemotingCommand | int:
    """Where ``queue`` starts when its group has no committed offset: the request whose
    ``offset`` answers that, or the offset itself (see the module docstring)."""
    retry = queue.topic.startswith(RETRY_PREFIX)
    if consume_from is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return min_offset_request(queue)
    if consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
        if retry:
            return max_offset_request(queue)
        if timestamp_ms is None:
            raise ValueError("CONSUME_FROM_TIMESTAMP needs a timestamp (epoch ms)")
        return search_offset_request(queue, timestamp_ms)
    return 0 if retry else max_offset_request(queue)


class _QueueOffset(msgspec.Struct, rename="camel"):
    topic: str
    broker_name: str
    queue_id: int
    offset: int


class _ResetOffsetBody(msgspec.Struct, rename="camel"):
    offset_table: list[_QueueOffset] = []


_reset_decoder = msgspec.json.Decoder(_ResetOffsetBody)


def read_reset_offsets(request: RemotingCommand) -> dict[MessageQueue, int]:
    """The new offsets a RESET_CONSUMER_CLIENT_OFFSET request carries (none without a
    body); a body that is not the documented JSON raises :class:`RemoteProtocolError`."""
    body = request.full_body()
    if not body.strip():
        return {}
    try:
        table = _reset_decoder.decode(body).offset_table
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RemoteProtocolError(f"RESET_CONSUMER_CLIENT_OFFSET body: {exc}") from exc
    return {MessageQueue(e.topic, e.broker_name, e.queue_id): e.offset for e in table}

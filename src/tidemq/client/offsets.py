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
"""

from __future__ import annotations

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
from tidemq.errors import ResponseCode, error_for_code
from tidemq.types import MessageQueue

__all__ = [
    "check_success",
    "earliest_time_request",
    "max_offset_request",
    "min_offset_request",
    "query_offset_request",
    "read_committed",
    "read_offset",
    "read_timestamp",
    "search_offset_request",
    "update_offset_request",
]


def check_success(response: RemotingCommand, *, address: str) -> None:
    """Raise the error for ``response``'s code unless it is SUCCESS."""
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=address)


def query_offset_request(group: str, queue: MessageQueue) -> RemotingCommand:
    header = QueryConsumerOffsetRequestHeader(
        consumer_group=group, topic=queue.topic, queue_id=queue.queue_id,
        set_zero_if_not_found=False, broker_name=queue.broker_name,
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

"""The families of request codes the broker treats alike: sends, pulls, offset requests."""

from __future__ import annotations

from tidemq.codec.command import RequestCode

__all__ = ["OFFSET_CODES", "PULL_CODES", "SEND_CODES"]

#: SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320).
SEND_CODES = frozenset(int(c) for c in (
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE))
#: PULL_MESSAGE (11), LITE_PULL_MESSAGE (361).
PULL_CODES = frozenset(int(c) for c in (RequestCode.PULL_MESSAGE,
                                        RequestCode.LITE_PULL_MESSAGE))
#: Consumer offsets and the queue positions of remoting.md §2.9.
OFFSET_CODES = frozenset(int(c) for c in (
    RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME))

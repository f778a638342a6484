"""PULL_MESSAGE (11) as plain functions: build the request, read the answer (remoting.md §2.8).

Pull ``sysFlag`` bits sent here: SUBSCRIPTION (0x4) always -- the request carries the
expression, so the broker needs no heartbeat-registered subscription -- and SUSPEND
(0x2) when the broker may hold the request (long polling). Offsets are committed with
UPDATE_CONSUMER_OFFSET, not piggy-backed.

=======================  ================  ============================================
response code            status            what the client does
=======================  ================  ============================================
0 SUCCESS                FOUND             decode the records, keep those whose tag
                                           matches, continue at ``nextBeginOffset``
19 PULL_NOT_FOUND        NO_NEW_MSG        continue at ``nextBeginOffset``
20 PULL_RETRY_IMMEDIATELY  NO_MATCHED_MSG  continue at ``nextBeginOffset``
21 PULL_OFFSET_MOVED     OFFSET_ILLEGAL    ``nextBeginOffset`` is the corrected offset
anything else            --                the code's error is raised
=======================  ================  ============================================

Found messages get the requested queue's id and broker name and the ``MIN_OFFSET`` /
``MAX_OFFSET`` properties, as the Java client adds them.

BatchCQ topics (RIP-26, store.md §3.6): the broker returns whole inner batches, so a pull
from an offset inside a batch brings the batch's earlier messages too. Each sub-message
has its own offset (the batch's base plus its index) and id (its ``UNIQ_KEY``);
:func:`read_pull_response` drops those below the requested offset (the Java client does
not), and the next offset is the broker's ``nextBeginOffset`` -- the end of the last
batch -- never one derived from the messages.
"""

from __future__ import annotations

from typing import NamedTuple

from tidemq.client.message_batch import (
    MessageBatch,
    ParentColumns,
    decode_pulled,
    pull_properties,
    read_batch,
)
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader, PullMessageResponseHeader
from tidemq.codec.schema import INT64
from tidemq.errors import ResponseCode, error_for_code
from tidemq.types import MessageExt, MessageQueue, PullStatus

__all__ = [
    "PULL_FLAG_COMMIT_OFFSET",
    "PULL_FLAG_SUBSCRIPTION",
    "PULL_FLAG_SUSPEND",
    "PullBatch",
    "PullChild",
    "PullResult",
    "PulledBody",
    "pull_request",
    "read_pull_batch",
    "read_pull_body",
    "read_pull_response",
]

PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

_QUEUE_OFFSET = PullMessageRequestHeader.ext_keys()["queue_offset"]
_SUGGEST = PullMessageResponseHeader.ext_keys()["suggest_which_broker_id"]
# ``PullStatus.FOUND`` read once: an attribute of an enum class goes through the enum type's
# ``__getattr__`` hook (Python 3.11), several times slower than a global.
_FOUND = PullStatus.FOUND
#: Pull ext per (group, queue, limits, subscription): only ``queueOffset`` changes.
_templates: dict[tuple[object, ...], dict[str, str]] = {}
_MAX_TEMPLATES = 65536

_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PullResult(NamedTuple):
    """One pull: unpacks as ``(status, next_offset, min_offset, max_offset, messages)``."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]


class PullBatch(NamedTuple):
    """One pull read as columns (:func:`read_pull_batch`): ``batch`` is ``None`` when no
    message is left (not FOUND, or all filtered out)."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    batch: MessageBatch | None


class PulledBody(NamedTuple):
    """One pull with its records left undecoded (:func:`read_pull_body`): ``body`` is
    ``b""`` unless ``status`` is FOUND."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    body: bytes


class PullChild(RemotingCommand):
    """A FOUND pull response that came as child ``index`` of a batch-protocol parent whose
    small bodies :func:`read_pull_batch` reads as one (``parent``); the same response
    otherwise (:mod:`tidemq.client.batch_rpc` makes these)."""

    __slots__ = ("index", "parent")

    parent: ParentColumns
    index: int

    @classmethod
    def of(cls, response: RemotingCommand, parent: ParentColumns, index: int) -> PullChild:
        child = cls(response.code, response.opaque, response.flag, response.language,
                    response.version, response.remark, response.ext_fields, response.body,
                    response.body_parts, response.serialize_type)
        child.parent = parent
        child.index = index
        return child


def pull_request(
    group: str,
    queue: MessageQueue,
    offset: int,
    *,
    max_nums: int,
    subscription: Subscription,
    suspend_ms: int = 0,
    code: int = RequestCode.PULL_MESSAGE,
) -> RemotingCommand:
    """A pull of up to ``max_nums`` messages from ``offset``; ``suspend_ms > 0`` lets the
    broker hold it that long when there is nothing yet."""
    key = (group, queue, max_nums, subscription.expression, subscription.version,
           suspend_ms, code)
    template = _templates.get(key)
    if template is None:
        sys_flag = PULL_FLAG_SUBSCRIPTION | (PULL_FLAG_SUSPEND if suspend_ms > 0 else 0)
        header = PullMessageRequestHeader(
            consumer_group=group, topic=queue.topic, queue_id=queue.queue_id,
            queue_offset=0, max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=0,
            suspend_timeout_millis=max(suspend_ms, 0), subscription=subscription.expression,
            sub_version=subscription.version, expression_type="TAG",
            broker_name=queue.broker_name,
        )
        if len(_templates) >= _MAX_TEMPLATES:
            _templates.clear()
        template = _templates[key] = header.to_ext()
    ext = template.copy()
    ext[_QUEUE_OFFSET] = str(offset)  # keeps the key's place: the same ext as to_ext()
    return RemotingCommand.request(code, ext)


def read_pull_response(response: RemotingCommand, queue: MessageQueue,
                       subscription: Subscription, *, address: str,
                       offset: int | None = None) -> PullResult:
    """The result of a pull of ``queue`` (see the module docstring); messages below
    ``offset``, the offset the pull asked for, are dropped (``None``: keep all)."""
    status, nxt, low, high = _head(response, address)
    messages: list[MessageExt] = []
    if status is _FOUND:
        messages = decode_pulled(response.full_body(), queue, pull_properties(low, high), offset,
                                 subscription.tags)
    return PullResult(status, nxt, low, high, messages)


def read_pull_batch(response: RemotingCommand, queue: MessageQueue,
                    subscription: Subscription, *, address: str,
                    offset: int | None = None) -> PullBatch:
    """:func:`read_pull_response` with the messages as one
    :class:`~tidemq.client.message_batch.MessageBatch`: the same status handling, errors,
    offsets, rows and filtering."""
    status, nxt, low, high = _head(response, address)
    batch = None
    if status is _FOUND:
        # A child of a batch-protocol parent holds a view of the parent's (immutable)
        # body: read it in place rather than copy it out first.
        body = response.body if response.body_parts is None else response.full_body()
        parent = ((response.parent, response.index) if isinstance(response, PullChild)
                  else None)
        batch = read_batch(body, queue, low, high, offset, subscription.tags, parent)
    return PullBatch(status, nxt, low, high, batch)


def read_pull_body(response: RemotingCommand, *, address: str) -> PulledBody:
    """:func:`read_pull_response` without the decoding, for readers that decode the
    records themselves (:mod:`tidemq.client.records`): the same status handling and
    errors; no tag filtering beyond the broker's (by tag hash)."""
    status, nxt, low, high = _head(response, address)
    body = response.full_body() if status is _FOUND else b""
    return PulledBody(status, nxt, low, high, body)


def _head(response: RemotingCommand, address: str) -> tuple[PullStatus, int, int, int]:
    """A pull response's status, next offset and the queue's min and max offsets; an
    error code raises its error."""
    status = _STATUS.get(response.code)
    if status is None:
        raise error_for_code(response.code, response.remark or "", address=address)
    nxt, low, high = _offsets(response.ext_fields)
    return status, nxt, low, high


_MIN64, _MAX64 = INT64


def _offsets(ext: dict[str, str]) -> tuple[int, int, int]:
    """``nextBeginOffset``, ``minOffset``, ``maxOffset``: straight from their canonical
    text, else through the header schema (its errors, Java's parsing rules)."""
    try:
        nxt, low, high = ext["nextBeginOffset"], ext["minOffset"], ext["maxOffset"]
        suggest = ext[_SUGGEST]
        values = int(nxt), int(low), int(high)
        hint = int(suggest)
        if (len(ext) == 4 and str(values[0]) == nxt and str(values[1]) == low
                and str(values[2]) == high and str(hint) == suggest
                and min(values) >= _MIN64 and max(values) <= _MAX64
                and _MIN64 <= hint <= _MAX64):
            return values
    except (KeyError, ValueError):
        pass
    header = PullMessageResponseHeader.from_ext(ext)
    return header.next_begin_offset, header.min_offset, header.max_offset

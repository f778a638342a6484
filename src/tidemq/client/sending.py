"""Sends as plain functions: prepare the message, build the command, read the answer.

Shared by the async :class:`~tidemq.client.producer.Producer` and the
:class:`~tidemq.client.blocking.BlockingProducer` (remoting.md §2.7).

Preparing a message checks it (:mod:`tidemq.client.validation`) and gives it, on a copy,
what every attempt must share: its ``UNIQ_KEY`` (the id applications see, so retries do
not make a second id) and ``WAIT=true`` unless the caller set ``WAIT``.

=============================  ============================================
response code                  result
=============================  ============================================
0 SUCCESS                      ``SendStatus.SEND_OK``
10 FLUSH_DISK_TIMEOUT          ``SendStatus.FLUSH_DISK_TIMEOUT``
11 SLAVE_NOT_AVAILABLE         ``SendStatus.SLAVE_NOT_AVAILABLE``
12 FLUSH_SLAVE_TIMEOUT         ``SendStatus.FLUSH_SLAVE_TIMEOUT``
anything else                  the code's error (``retriable`` per §2.1)
=============================  ============================================

The message was stored in all four cases; the last three only say that its durability
was not confirmed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tidemq.client.config import ClientConfig
from tidemq.client.errors import (
    InvalidMessageError,
    InvalidTopicError,
    MessageTooBigError,
    NoRouteError,
)
from tidemq.client.queue_types import QueueType
from tidemq.client.topic_route import TopicRoute
from tidemq.client.validation import check_batch, check_message, check_properties
from tidemq.codec.batch_protocol import plain_int
from tidemq.codec.command import RemotingCommand
from tidemq.codec.compression import CompressionType
from tidemq.codec.headers import SendMessageResponseHeader
from tidemq.codec.message import SendOptions, batch_send_request, send_request
from tidemq.codec.schema import INT32, INT64, HeaderFieldError
from tidemq.codec.send_batch import (
    EncodedBatch,
    MixedTopicsError,
    encode_send_batch,
    encode_send_bodies,
    send_batch_request,
)
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import ResponseCode, error_for_code
from tidemq.formats.properties import PropertyKey
from tidemq.types import Message, MessageQueue, SendResult, SendStatus

__all__ = [
    "BatchCompression",
    "PreparedBatch",
    "batch_msg_id",
    "build_batch",
    "build_send",
    "new_send_result",
    "prepare_batch",
    "prepare_message",
    "prepare_send_batch",
    "prepare_send_bodies",
    "publish_queues",
    "read_send_response",
    "send_options",
]

# ``QueueType.BATCH`` read once: an attribute of an enum class goes through the enum
# type's ``__getattr__`` hook (Python 3.11), several times slower than a global.
_BATCH = QueueType.BATCH
_STATUS: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
}


def send_options(config: ClientConfig, group: str) -> SendOptions:
    return SendOptions(
        producer_group=group,
        default_topic=config.default_topic,
        default_topic_queue_nums=config.default_topic_queue_nums,
        compress_over=config.compress_msg_body_over_howmuch,
    )


def _keyed(msg: Message, keys: UniqKeyGenerator, now_ms: int,
           sharding_key: str | None) -> Message:
    props = dict(msg.properties)
    if not props.get(PropertyKey.UNIQ_KEY):
        props[PropertyKey.UNIQ_KEY] = keys.next_key(now_ms)
    props.setdefault(PropertyKey.WAIT, "true")
    if sharding_key is not None:
        props[PropertyKey.SHARDING_KEY] = sharding_key
    if type(msg) is Message:  # a subclass may have fields of its own
        return Message(msg.topic, msg.body, props, msg.flag)
    return dataclasses.replace(msg, properties=props)


def prepare_message(msg: Message, *, max_size: int, keys: UniqKeyGenerator, now_ms: int,
                    sharding_key: str | None = None) -> Message:
    """A checked copy of ``msg`` with its ``UNIQ_KEY`` and ``WAIT`` (see module docstring)."""
    check_message(msg, max_size)
    return _keyed(msg, keys, now_ms, sharding_key)


def prepare_batch(msgs: Sequence[Message], *, max_size: int, keys: UniqKeyGenerator,
                  now_ms: int) -> list[Message]:
    """Checked, keyed copies of a batch's messages (one topic, within ``max_size``)."""
    keyed = [_keyed(m, keys, now_ms, None) for m in msgs]
    check_batch(keyed, max_size)
    return keyed


def build_send(msg: Message, opts: SendOptions, queue: MessageQueue, *, now_ms: int,
               keys: UniqKeyGenerator) -> RemotingCommand:
    """SEND_MESSAGE_V2 of a prepared ``msg`` to ``queue``."""
    return send_request(msg, opts, queue_id=queue.queue_id, now_ms=now_ms, keys=keys,
                        broker_name=queue.broker_name)


def build_batch(msgs: Sequence[Message], opts: SendOptions, queue: MessageQueue, *,
                now_ms: int, keys: UniqKeyGenerator) -> RemotingCommand:
    """SEND_BATCH_MESSAGE of prepared ``msgs`` to ``queue``."""
    return batch_send_request(msgs, opts, queue_id=queue.queue_id, now_ms=now_ms, keys=keys,
                              broker_name=queue.broker_name)


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCompression:
    """How a producer compresses inner batches (RIP-26 end-to-end compression): with
    ``codec`` (``None``: never) at ``level`` (when ``None``, the codec's entry in
    :data:`~tidemq.codec.compression.BATCH_LEVELS`: zstd -1), kept only when it saves at
    least ``min_saving`` of the body. Outer batches are never compressed (the broker
    splits them)."""

    codec: CompressionType | None = CompressionType.ZSTD
    level: int | None = None
    min_saving: float = 0.05


class PreparedBatch:
    """A checked batch, encoded once; every attempt builds its request from it for the
    queue type of the broker it goes to -- an inner batch (compressed once, on first
    use) for BatchCQ, an outer batch otherwise."""

    __slots__ = ("_keys", "_packed", "compression", "encoded")

    def __init__(self, encoded: EncodedBatch, compression: BatchCompression) -> None:
        self.encoded = encoded
        self.compression = compression
        self._packed: tuple[bytes, int] | None = None
        self._keys: list[str] | None = None

    @property
    def topic(self) -> str:
        return self.encoded.topic

    @property
    def count(self) -> int:
        return self.encoded.count

    @property
    def alike(self) -> bool:
        """Whether the messages share their properties (but for the ``UNIQ_KEY`` the
        encoder gave each), flag and body length: the encoder's uniform layout."""
        e = self.encoded
        return e.listed_keys is None and e.min_body == e.max_body

    @property
    def keys(self) -> list[str]:
        """The messages' ``UNIQ_KEY``s, in order (made once; do not modify)."""
        if self._keys is None:
            self._keys = self.encoded.keys
        return self._keys

    @property
    def key_view(self) -> Sequence[str]:
        """:attr:`keys`, each made when read, holding nothing of the encoded batch."""
        if self._keys is not None:
            return self._keys
        return self.encoded.key_view

    def packed(self) -> tuple[bytes, int]:
        """The inner-batch body and its sysflag bits (compressed when that pays)."""
        if self._packed is None:
            c = self.compression
            if c.codec is None:
                self._packed = (self.encoded.entries, 0)
            else:
                self._packed = self.encoded.compressed(c.codec, c.level, c.min_saving)
        return self._packed

    def msg_id(self, queue_type: QueueType) -> str:
        """The result's ``msg_id``: the batch key of an inner batch, else the messages'
        keys joined by commas."""
        if queue_type is _BATCH:
            return self.encoded.batch_key
        if self._keys is not None:
            return ",".join(self._keys)
        return self.encoded.joined_keys

    def request(self, opts: SendOptions, queue: MessageQueue, queue_type: QueueType, *,
                now_ms: int) -> RemotingCommand:
        """The SEND_BATCH_MESSAGE of this batch to ``queue``, whose topic has
        ``queue_type`` on its broker."""
        inner = queue_type is _BATCH
        body, sys_flag = self.packed() if inner else (self.encoded.entries, 0)
        return send_batch_request(
            self.encoded, inner=inner, producer_group=opts.producer_group,
            queue_id=queue.queue_id, now_ms=now_ms, body=body, sys_flag=sys_flag,
            default_topic=opts.default_topic,
            default_topic_queue_nums=opts.default_topic_queue_nums,
            broker_name=queue.broker_name, v1=opts.v1)


def prepare_send_batch(msgs: Sequence[Message], *, max_size: int, keys: UniqKeyGenerator,
                       now_ms: int, compression: BatchCompression,
                       checked: bool = False) -> PreparedBatch:
    """Check ``msgs`` as :func:`prepare_batch` does (without a per-message copy) and
    encode them once, giving keys to messages without one. ``checked``: each message's
    properties were checked already (the auto-batcher checks them as they arrive)."""
    if not msgs:
        raise InvalidMessageError("a batch needs at least one message")
    first = msgs[0]
    check_message(first, max_size)
    topic = first.topic
    if topic.startswith("%RETRY%"):
        raise InvalidTopicError("a batch cannot go to a retry topic", topic=topic)
    if not checked:
        # A batch from one producer loop usually repeats one property set: checked once.
        props = [m.properties for m in msgs]
        for msg in (first,) if props.count(first.properties) == len(props) else msgs:
            check_properties(msg)
    try:  # the encoder checks the topics as it reads the batch
        encoded = encode_send_batch(msgs, keys=keys, now_ms=now_ms)
    except MixedTopicsError as exc:
        raise InvalidMessageError(f"a batch mixes topics {topic!r} and {exc.other!r}",
                                  topic=topic) from None
    return _prepared(encoded, max_size, compression)


def prepare_send_bodies(topic: str, bodies: list[bytes], *, max_size: int,
                        keys: UniqKeyGenerator, now_ms: int,
                        compression: BatchCompression,
                        properties: dict[str, str] | None = None) -> PreparedBatch:
    """:func:`prepare_send_batch` of messages of ``topic`` that share ``properties``
    (checked already; none by default), given as their bodies only
    (:func:`~tidemq.codec.send_batch.encode_send_bodies`)."""
    if not bodies:
        raise InvalidMessageError("a batch needs at least one message")
    check_message(Message(topic, bodies[0]), max_size)
    if topic.startswith("%RETRY%"):
        raise InvalidTopicError("a batch cannot go to a retry topic", topic=topic)
    encoded = encode_send_bodies(topic, bodies, keys=keys, now_ms=now_ms,
                                 properties=properties)
    return _prepared(encoded, max_size, compression)


def _prepared(encoded: EncodedBatch, max_size: int,
              compression: BatchCompression) -> PreparedBatch:
    """``encoded``, once its bodies and its whole size are within ``max_size``."""
    topic = encoded.topic
    if encoded.min_body == 0:
        raise InvalidMessageError("the message body is empty", topic=topic)
    if encoded.max_body > max_size:
        raise MessageTooBigError(topic=topic, size=encoded.max_body, limit=max_size)
    if len(encoded.entries) > max_size:
        raise MessageTooBigError(topic=topic, size=len(encoded.entries), limit=max_size)
    return PreparedBatch(encoded, compression)


def read_send_response(response: RemotingCommand, queue: MessageQueue, *, address: str,
                       msg_id: str, count: int = 1) -> SendResult:
    """The result of a send of ``count`` messages to ``queue`` (table in the module
    docstring). ``msg_id`` is the message's ``UNIQ_KEY`` (a batch: the keys joined by
    commas; a BatchCQ broker's ``batchUniqId`` replaces it)."""
    status = _STATUS.get(response.code)
    if status is None:
        raise error_for_code(response.code, response.remark or "", address=address)
    fields = _plain_send_fields(response.ext_fields)
    if fields is not None:  # what from_ext would give, without building the header
        offset_msg_id, queue_id, queue_offset, txn, batch_id = fields
        if queue_id != queue.queue_id:
            queue = MessageQueue(queue.topic, queue.broker_name, queue_id)
        return new_send_result(status, batch_id or msg_id, offset_msg_id, queue,
                               queue_offset, txn, count)
    try:
        header = SendMessageResponseHeader.from_ext(response.ext_fields)
    except HeaderFieldError:
        if status is SendStatus.SEND_OK:
            raise
        return SendResult(status, msg_id, "", queue, -1, message_count=count)
    return SendResult(
        status=status,
        msg_id=header.batch_uniq_id or msg_id,
        offset_msg_id=header.msg_id,
        queue=MessageQueue(queue.topic, queue.broker_name, header.queue_id),
        queue_offset=header.queue_offset,
        transaction_id=header.transaction_id,
        message_count=count,
    )


_RESPONSE_KEYS = SendMessageResponseHeader.ext_keys()
_K_MSG_ID, _K_QUEUE_ID, _K_QUEUE_OFFSET, _K_TXN, _K_BATCH_ID = (_RESPONSE_KEYS[f] for f in (
    "msg_id", "queue_id", "queue_offset", "transaction_id", "batch_uniq_id"))


def _plain_send_fields(ext: dict[str, str]
                       ) -> tuple[str, int, int, str | None, str | None] | None:
    """``(msg_id, queue_id, queue_offset, transaction_id, batch_uniq_id)`` of a send
    response whose numbers are in their canonical decimal form and in range -- every
    answer of a healthy broker; ``None`` for anything else, which the header schema then reads (and
    refuses with its own error)."""
    msg_id = ext.get(_K_MSG_ID)
    queue_id = plain_int(ext.get(_K_QUEUE_ID), INT32)
    queue_offset = plain_int(ext.get(_K_QUEUE_OFFSET), INT64)
    if msg_id is None or queue_id is None or queue_offset is None:
        return None
    return msg_id, queue_id, queue_offset, ext.get(_K_TXN), ext.get(_K_BATCH_ID)


_new = object.__new__
_SET_FIELDS = tuple(SendResult.__dict__[name].__set__ for name in (
    "status", "msg_id", "offset_msg_id", "queue", "queue_offset", "transaction_id",
    "message_count"))


def new_send_result(status: SendStatus, msg_id: str, offset_msg_id: str,
                    queue: MessageQueue, queue_offset: int, transaction_id: str | None,
                    message_count: int = 1) -> SendResult:
    """``SendResult(...)`` built through its slots: the frozen dataclass's ``__init__``
    costs three times as much (the auto-batching producer makes one per message)."""
    result: SendResult = _new(SendResult)
    s_status, s_id, s_offset_id, s_queue, s_offset, s_txn, s_count = _SET_FIELDS
    s_status(result, status)
    s_id(result, msg_id)
    s_offset_id(result, offset_msg_id)
    s_queue(result, queue)
    s_offset(result, queue_offset)
    s_txn(result, transaction_id)
    s_count(result, message_count)
    return result


def batch_msg_id(msgs: Sequence[Message]) -> str:
    """The ``msg_id`` of a batch's result: the messages' ``UNIQ_KEY``s joined by commas."""
    return ",".join(m.properties.get(PropertyKey.UNIQ_KEY, "") for m in msgs)


def publish_queues(route: TopicRoute, fixed: MessageQueue | None) -> Sequence[MessageQueue]:
    """The queues a send may choose from (:class:`NoRouteError` when there is none and the
    caller did not fix the queue)."""
    if fixed is None and not route.publish_queues:
        raise NoRouteError(route.topic, "the route has no writable queue with a master")
    return route.publish_queues

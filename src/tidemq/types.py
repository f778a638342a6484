"""Plain value types shared by every layer. No I/O; standard library only."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, ClassVar, NamedTuple

__all__ = [
    "FlushDiskType",
    "GetStatus",
    "Message",
    "MessageExt",
    "MessageQueue",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "SysFlag",
]


#: The placeholder broker name under which logical queues (RIP-21) are addressed.
LOGICAL_BROKER = "__logical__"


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker (or under a logical-queue placeholder broker)."""

    topic: str
    broker_name: str
    queue_id: int


class SysFlag(enum.IntFlag):
    """Record sysflag bits (docs/reference/store.md §1.4)."""

    NONE = 0
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_LZ4 = 0x100
    COMPRESSION_ZSTD = 0x200
    COMPRESSION_ZLIB = 0x300


TRANSACTION_MASK = 0xC
COMPRESSION_MASK = 0x700


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class GetStatus(enum.Enum):
    """Outcome of a store read (upstream GetMessageStatus)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclasses.dataclass(slots=True)
class Message:
    """A message as a producer builds it."""

    topic: str
    body: bytes
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]


_MASK64 = (1 << 64) - 1


def _parse_property_text(raw: bytes) -> dict[str, str]:
    """The property string of docs/reference/store.md §1.5 (as
    ``formats.properties.decode_properties``; this layer may not import it). ``raw`` was
    checked to be UTF-8 by its decoder."""
    out: dict[str, str] = {}
    if raw:
        for segment in raw.decode("utf-8").split("\x02"):
            name, sep, value = segment.partition("\x01")
            if sep and name and value:
                out[name] = value
    return out


class MessageExt:
    """A stored message as a consumer sees it (one decoded record or inner-batch entry).

    Constructed like the dataclass it was (same fields, order and defaults); fields are
    plain attributes, equality compares every field, instances are unhashable.

    Messages made by :func:`tidemq.codec.message.decode_messages` keep their property
    text undecoded until :attr:`properties` (or :attr:`msg_id`, :attr:`tags`,
    :attr:`keys`) is first read: the decoder fills the slots directly, leaving
    ``_properties`` and ``_msg_id`` ``None``, the raw text in ``_raw_properties`` and,
    in ``_lazy``, the offset message id's host prefix and properties to add (a pull's
    ``MIN_OFFSET``/``MAX_OFFSET``, shared by its messages). ``msg_id`` is then the
    ``UNIQ_KEY`` of the stored properties, else the offset message id.
    """

    __slots__ = (
        "_lazy",
        "_msg_id",
        "_properties",
        "_raw_properties",
        "body",
        "body_crc",
        "born_host",
        "born_timestamp",
        "broker_name",
        "commit_log_offset",
        "flag",
        "prepared_transaction_offset",
        "queue_id",
        "queue_offset",
        "reconsume_times",
        "store_host",
        "store_size",
        "store_timestamp",
        "sys_flag",
        "topic",
    )
    #: The fields, in constructor order.
    __match_args__ = (
        "topic", "body", "properties", "queue_id", "queue_offset", "commit_log_offset",
        "store_size", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
        "store_host", "reconsume_times", "flag", "body_crc", "prepared_transaction_offset",
        "msg_id", "broker_name",
    )

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    flag: int
    body_crc: int
    prepared_transaction_offset: int
    #: The broker the message was pulled from (set by consumers; not in the record).
    broker_name: str
    _properties: dict[str, str] | None
    _raw_properties: bytes
    _msg_id: str | None
    _lazy: tuple[str, dict[str, str] | None]
    #: The dataclass field table MessageExt had (``dataclasses.fields``, ``asdict`` and
    #: ``replace`` still work on it), set below the class.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __init__(
        self, topic: str, body: bytes, properties: dict[str, str], queue_id: int,
        queue_offset: int, commit_log_offset: int, store_size: int, sys_flag: int,
        born_timestamp: int, born_host: str, store_timestamp: int, store_host: str,
        reconsume_times: int, flag: int = 0, body_crc: int = 0,
        prepared_transaction_offset: int = 0, msg_id: str = "", broker_name: str = "",
    ) -> None:
        self.topic = topic
        self.body = body
        self._properties = properties
        self._raw_properties = b""
        self._msg_id = msg_id
        self._lazy = ("", None)
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.store_size = store_size
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.flag = flag
        self.body_crc = body_crc
        self.prepared_transaction_offset = prepared_transaction_offset
        self.broker_name = broker_name

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = _parse_property_text(self._raw_properties)
            id_prefix, extra = self._lazy
            if self._msg_id is None:
                self._msg_id = props.get("UNIQ_KEY") or (
                    id_prefix + format(self.commit_log_offset & _MASK64, "016X"))
            if extra:
                props.update(extra)
            self._properties = props
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        if self._msg_id is None:
            self.properties  # noqa: B018 -- pins msg_id to the stored properties
        self._properties = value

    @property
    def msg_id(self) -> str:
        """The ``UNIQ_KEY`` property, else the offset message id."""
        if self._msg_id is None:
            self.properties  # noqa: B018 -- decoding them sets the id
        assert self._msg_id is not None
        return self._msg_id

    @msg_id.setter
    def msg_id(self, value: str) -> None:
        self._msg_id = value

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__match_args__)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, MessageExt)
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={value!r}" for name, value in
                          zip(self.__match_args__, self._fields(), strict=True))
        return f"MessageExt({inner})"


@dataclasses.dataclass
class _MessageExtFields:
    """MessageExt's fields as the dataclass it was; only its field table is used."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    flag: int = 0
    body_crc: int = 0
    prepared_transaction_offset: int = 0
    msg_id: str = ""
    broker_name: str = ""


MessageExt.__dataclass_fields__ = _MessageExtFields.__dataclass_fields__
MessageExt.__dataclass_params__ = _MessageExtFields.__dataclass_params__  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    #: Messages the result covers: a batch holds offsets ``queue_offset`` up to
    #: ``queue_offset + message_count - 1`` (see :attr:`queue_offsets`).
    message_count: int = 1

    @property
    def queue_offsets(self) -> range:
        """The queue offsets of the messages this result covers."""
        return range(self.queue_offset, self.queue_offset + self.message_count)

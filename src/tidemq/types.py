"""Plain value types shared by every layer. No I/O; standard library only."""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

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
    """Record sysflag bits (specs/store.md §1.4)."""

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


@dataclasses.dataclass(slots=True)
class MessageExt:
    """A stored message as a consumer sees it (one decoded record or inner-batch entry)."""

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
    #: The broker the message was pulled from (set by consumers; not in the record).
    broker_name: str = ""

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get("KEYS", "").split(" ") if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


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

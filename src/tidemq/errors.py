"""TideMQ's error hierarchy: one root, errors with fields, a registry of response codes.

Rules:

* Every error TideMQ raises derives from :class:`TideMQError` and carries its facts as
  attributes (``code``, ``topic``, ``queue_id``, ``offset`` ...), not only as text.
* Protocol errors say which side broke the rules: :class:`LocalProtocolError` (we, or our
  caller) versus :class:`RemoteProtocolError` (the peer).
* Broker answers are one :class:`ResponseCode` table; :func:`error_for_code` builds the
  exception class registered for a code, each with a ``retriable`` flag that producers use
  to decide whether to try another broker.

This module is a leaf: standard library only.
"""

from __future__ import annotations

import enum
from typing import ClassVar

__all__ = [
    "BindFailed",
    "BrokerResponseError",
    "ConfigError",
    "ConnectFailed",
    "ConnectionLost",
    "CorruptRecord",
    "FlushTimeout",
    "LocalProtocolError",
    "MessageTooLarge",
    "MetadataUnreadable",
    "PropertiesTooLarge",
    "ProtocolError",
    "QueueGap",
    "RemoteProtocolError",
    "RequestTimeout",
    "ResponseCode",
    "StoreError",
    "StoreReadOnly",
    "TideMQError",
    "TlsError",
    "TopicRefused",
    "error_for_code",
]


class TideMQError(Exception):
    """Root of every error raised by TideMQ."""


# ---------------------------------------------------------------- protocol and formats


class ProtocolError(TideMQError):
    """A frame, header or body broke the remoting protocol."""


class LocalProtocolError(ProtocolError):
    """We (or our caller) tried to produce something the protocol forbids."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""


class CorruptRecord(TideMQError):
    """Bytes that should hold a stored record or index entry do not.

    ``offset`` is where the record starts in the buffer or log, ``reason`` says what failed.
    """

    def __init__(self, reason: str, *, offset: int = -1) -> None:
        super().__init__(f"corrupt record at {offset}: {reason}")
        self.reason = reason
        self.offset = offset


class ConfigError(TideMQError):
    """A configuration key or value is wrong; ``key`` names it."""

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key


# ---------------------------------------------------------------- store


class StoreError(TideMQError):
    """Failure inside the message store."""


class StoreReadOnly(StoreError):
    """The store refuses writes: a write error happened, the disk is full, or it is closed."""

    def __init__(self, status: str, *, cause: str = "") -> None:
        super().__init__(f"store is read-only ({status}){': ' + cause if cause else ''}")
        self.status = status
        self.cause = cause


class MessageTooLarge(StoreError):
    """A record is bigger than the configured limit or than one segment."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"record of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class PropertiesTooLarge(MessageTooLarge):
    """A record's properties would not fit their 2-byte length field once the store has
    added ``added`` (a property it assigns, such as ``INNER_MULTI_QUEUE_OFFSET``)."""

    def __init__(self, size: int, limit: int, *, added: str) -> None:
        StoreError.__init__(
            self, f"properties of {size} bytes with {added} exceed {limit} bytes")
        self.size = size
        self.limit = limit
        self.added = added


class TopicRefused(StoreError):
    """The store takes no message into ``topic`` now; ``why`` says what holds it (its
    deletion is under way). Nothing was stored: the caller answers in its own terms."""

    def __init__(self, topic: str, why: str) -> None:
        super().__init__(f"topic {topic} takes no messages now: {why}")
        self.topic = topic
        self.why = why


class QueueGap(StoreError):
    """A consume-queue entry would leave a hole: it is refused instead of papered over."""

    def __init__(self, topic: str, queue_id: int, expected: int, got: int) -> None:
        super().__init__(
            f"consume queue {topic}/{queue_id}: entry for offset {got} but next slot is {expected}"
        )
        self.topic = topic
        self.queue_id = queue_id
        self.expected = expected
        self.got = got


class MetadataUnreadable(StoreError):
    """A metadata file a start needs (a broker table, the store's record of deleted
    topics) is there but does not read: empty, cut short or garbled. The start stops
    rather than go on with an empty table; ``path`` names the file, ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} does not read ({reason}); restore it from a backup or "
                         "a replica, or move it away to start without what it held")
        self.path = path
        self.reason = reason


class FlushTimeout(StoreError):
    """A SYNC_FLUSH wait passed its deadline; the data is written but not confirmed durable."""

    def __init__(self, offset: int, timeout_ms: int) -> None:
        super().__init__(f"flush to offset {offset} not confirmed within {timeout_ms} ms")
        self.offset = offset
        self.timeout_ms = timeout_ms


# ---------------------------------------------------------------- network


class ConnectionLost(TideMQError):
    """The connection to ``address`` closed or broke."""

    def __init__(self, address: str, reason: str = "") -> None:
        super().__init__(f"connection to {address} lost{': ' + reason if reason else ''}")
        self.address = address
        self.reason = reason


class ConnectFailed(ConnectionLost):
    """No connection to ``address`` could be made: ``reason`` says why (refused, an
    unknown host, no answer in time). Nothing was sent."""

    def __init__(self, address: str, reason: str) -> None:
        TideMQError.__init__(self, f"cannot connect to {address}: {reason}")
        self.address = address
        self.reason = reason


class BindFailed(TideMQError, OSError):
    """A server cannot listen on ``address``; ``errno`` is the socket's, ``reason`` says
    what to do about it. Still an ``OSError``, as the bind's own error was."""

    def __init__(self, address: str, errno: int | None, reason: str) -> None:
        OSError.__init__(self, errno, reason)
        self.address = address
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot listen on {self.address}: {self.reason}"


class TlsError(ConnectionLost):
    """A TLS connection to ``address`` could not be set up; ``cause`` says why in words
    (an expired or untrusted certificate, a host name it does not cover, a server that
    wants a client certificate or does not speak TLS)."""

    def __init__(self, address: str, cause: str) -> None:
        super().__init__(address, f"TLS: {cause}")
        self.cause = cause


class RequestTimeout(TideMQError):
    """No response to request ``opaque`` from ``address`` within ``timeout_ms``."""

    def __init__(self, address: str, code: int, opaque: int, timeout_ms: float) -> None:
        super().__init__(
            f"request code {code} (opaque {opaque}) to {address} timed out after "
            f"{timeout_ms:.0f} ms"
        )
        self.address = address
        self.code = code
        self.opaque = opaque
        self.timeout_ms = timeout_ms


# ---------------------------------------------------------------- broker response codes


class ResponseCode(enum.IntEnum):
    """Remoting response codes (docs/reference/remoting.md §2.1). Values are stable wire numbers."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    # Controller mode (RocketMQ 5)
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014


#: Codes on which a Java producer retries the send on another queue or broker.
RETRIABLE_CODES: frozenset[int] = frozenset({1, 2, 14, 16, 17, 204, 205, 1500})


class BrokerResponseError(TideMQError):
    """A broker or name server answered with a non-success ``code``; ``remark`` is its text."""

    code: ClassVar[int] = -1
    retriable: ClassVar[bool] = False

    def __init__(self, remark: str = "", *, code: int | None = None, address: str = "") -> None:
        if code is not None:
            self.code = code  # type: ignore[misc]
        try:
            name = ResponseCode(self.code).name
        except ValueError:
            name = "UNKNOWN"
        where = f" from {address}" if address else ""
        super().__init__(f"{name}({self.code}){where}: {remark}")
        self.remark = remark
        self.address = address


_REGISTRY: dict[int, type[BrokerResponseError]] = {}


def _register() -> None:
    for rc in ResponseCode:
        if rc is ResponseCode.SUCCESS:
            continue
        cls_name = "".join(part.capitalize() for part in rc.name.split("_")) + "Error"
        cls = type(
            cls_name,
            (BrokerResponseError,),
            {"code": int(rc), "retriable": int(rc) in RETRIABLE_CODES, "__module__": __name__},
        )
        _REGISTRY[int(rc)] = cls
        globals()[cls_name] = cls


_register()


def error_for_code(code: int, remark: str = "", *, address: str = "") -> BrokerResponseError:
    """Build the exception registered for ``code`` (a generic one for unknown codes)."""
    cls = _REGISTRY.get(code)
    if cls is None:
        return BrokerResponseError(remark, code=code, address=address)
    return cls(remark, address=address)

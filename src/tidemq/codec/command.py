"""The remoting command: code, opaque, flag bits, ext fields and body.

Flag bits: bit 0 (1) marks a response, bit 1 (2) a oneway request. Ext fields are the
command's "custom header" as a string map; typed views over them live in
``tidemq.codec.headers``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from tidemq.errors import ResponseCode

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "LanguageCode",
    "PlainText",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

#: The version TideMQ reports: V5_3_3, what current Java clients send (remoting.md §1.6).
TIDEMQ_VERSION = 479


class SerializeType(enum.IntEnum):
    JSON = 0
    ROCKETMQ = 1


class LanguageCode(enum.IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class RequestCode(enum.IntEnum):
    """Request codes (docs/reference/remoting.md §2.2). TideMQ extensions start at 20000."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST = 225
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_TOPIC_STATS_INFO = 202
    RESET_CONSUMER_CLIENT_OFFSET = 220
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_DATA_VERSION = 322
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    GET_TOPIC_CONFIG = 351
    LITE_PULL_MESSAGE = 361
    QUERY_ASSIGNMENT = 400
    UPDATE_AND_CREATE_STATIC_TOPIC = 513
    QUERY_CONSUME_QUEUE = 321
    GET_ALL_PRODUCER_INFO = 328
    DELETE_EXPIRED_COMMITLOG = 329
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    GET_BROKER_HA_STATUS = 907
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_TOPICS_BY_CLUSTER = 224
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_KVLIST_BY_NAMESPACE = 219
    BROKER_HEARTBEAT = 904
    # Controller mode (RocketMQ 5; served by tidemq.namesrv.controller)
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    # ACL 2.0 users and policies (RocketMQ 5.3)
    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_GET_USER = 3004
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_GET_ACL = 3009
    AUTH_LIST_ACL = 3010
    # TideMQ extensions (docs/protocol.md)
    UPDATE_LOGICAL_QUEUE_MAPPING = 20100
    QUERY_LOGICAL_QUEUE_MAPPING = 20101
    SEAL_LOGICAL_QUEUE = 20102
    DELETE_LOGICAL_QUEUE_MAPPING = 20103
    BATCH_REQUEST = 20000  # the batch protocol, tidemq.codec.batch_protocol
    DELETE_LMQ = 20200
    GET_LMQ_METADATA = 20201  # a replica's copy of its master's LMQ offsets and tombstones
    GET_DELETED_TOPICS = 20202  # a replica's copy of its master's topic-deletion marks
    GET_AUTH_METADATA = 20300  # a replica's copy of its master's ACL 2.0 users and ACLs
    NOTIFY_METADATA_CHANGED = 20400  # a master tells a replica to copy its metadata now


class PlainText(str):
    """An ext field's value that JSON writes as it is, between quotes: text without a
    quote, a backslash or a control character, as whoever makes one vouches (a send's
    offset message ids: hex digits and commas). The JSON header encoder then skips its
    escape scan of the value; anywhere else it is the ``str`` it holds."""

    __slots__ = ()


@dataclasses.dataclass(slots=True)
class RemotingCommand:
    """One request or response.

    ``body`` is the body as received. To send stored records without copying, set
    ``body_parts`` to a sequence of buffers (memoryviews of the store's mapped records);
    the frame encoder writes them as they are, after the head.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    language: str = "PYTHON"
    version: int = TIDEMQ_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes | bytearray | memoryview = b""
    body_parts: Sequence[bytes | bytearray | memoryview] | None = None
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        # Positional: a dataclass's __init__ matches keywords at a cost each.
        return cls(int(code), 0, FLAG_ONEWAY if oneway else 0, "PYTHON", TIDEMQ_VERSION,
                   None, ext_fields or {}, body, None, _JSON)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | bytearray | memoryview = b"",
    ) -> RemotingCommand:
        """A response to this request: same opaque and serialization, response flag set."""
        return RemotingCommand(int(code), self.opaque, FLAG_RESPONSE, "PYTHON", TIDEMQ_VERSION,
                               remark, ext_fields or {}, body, None, self.serialize_type)

    def body_length(self) -> int:
        if self.body_parts is not None:
            return sum(len(p) for p in self.body_parts)
        return len(self.body)

    def full_body(self) -> bytes:
        """The body as one bytes object (joins ``body_parts``; for clients and tests)."""
        if self.body_parts is not None:
            return b"".join(bytes(p) for p in self.body_parts)
        return bytes(self.body)


_JSON = SerializeType.JSON  # read once: an enum class's attribute goes through __getattr__

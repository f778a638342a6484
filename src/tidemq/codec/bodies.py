"""JSON command bodies (docs/reference/remoting.md §1.7, §2.3-§2.13), typed with msgspec.

Java writes bodies with fastjson: keys sorted, nulls omitted, enums by *name*, and maps
with numeric keys *unquoted* (``{"brokerAddrs":{0:"10.0.0.1:10911"}}`` -- not JSON).

* :func:`encode_body` emits standard JSON the same way: keys sorted, ``None`` members
  left out, enums by name, numeric map keys quoted.
* :func:`decode_body` is lenient like the Java reader: bare numeric map keys, enum
  ordinals as well as names (the C++ client sends ordinals), numbers sent as strings,
  unknown members, absent collections and a trailing newline are all accepted. Anything
  it cannot read raises :class:`~tidemq.errors.RemoteProtocolError`.

REGISTER_BROKER may also carry a deflate-compressed body (``compressed=true``); see
:func:`encode_register_body` and :func:`decode_register_body` for its layout.
"""

from __future__ import annotations

import enum
import re
import struct
import zlib
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

from tidemq.codec.compression import CompressionType, decompress
from tidemq.errors import CorruptRecord, RemoteProtocolError
from tidemq.types import MessageQueue

__all__ = [
    "BrokerData",
    "CMResult",
    "ClusterInfo",
    "ConsumeFromWhere",
    "ConsumeMessageDirectlyResult",
    "ConsumeType",
    "ConsumerData",
    "ConsumerListBody",
    "CreateTopicListRequestBody",
    "DataVersion",
    "HeartbeatData",
    "KVConfigSerializeWrapper",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageModel",
    "MessageQueueData",
    "ProducerData",
    "QueueData",
    "RegisterBrokerBody",
    "SubscriptionData",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicFilterType",
    "TopicList",
    "TopicRouteData",
    "UnlockBatchRequestBody",
    "decode_body",
    "decode_register_body",
    "encode_body",
    "encode_register_body",
    "encode_value",
]

#: Broker versions from V5_0_0 on put the static-topic section in compressed bodies.
V5_0_0 = 413


# ---------------------------------------------------------------- enums (Java ordinal order)


class ConsumeType(enum.StrEnum):
    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"
    CONSUME_POP = "CONSUME_POP"


class MessageModel(enum.StrEnum):
    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(enum.StrEnum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = (
        "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST"
    )
    CONSUME_FROM_MIN_OFFSET = "CONSUME_FROM_MIN_OFFSET"
    CONSUME_FROM_MAX_OFFSET = "CONSUME_FROM_MAX_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class CMResult(enum.StrEnum):
    """How a consumer's listener took a message given to it directly (309)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


class TopicFilterType(enum.StrEnum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


# ---------------------------------------------------------------- body types


class _Body(msgspec.Struct, rename="camel", kw_only=True):
    """Base: members are the camelCase of the field names unless renamed."""


class DataVersion(_Body):
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0


class TopicConfig(_Body):
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = {}


class CreateTopicListRequestBody(_Body):
    """Java ``CreateTopicListRequestBody``: the body of UPDATE_AND_CREATE_TOPIC_LIST (18)."""

    topic_config_list: list[TopicConfig] = []


class TopicConfigSerializeWrapper(_Body):
    """Java ``TopicConfigAndMappingSerializeWrapper``; the static-topic maps are kept
    as plain JSON (TideMQ never emits them, §2.15) but are always present as Java
    name servers dereference them."""

    topic_config_table: dict[str, TopicConfig] = {}
    data_version: DataVersion = msgspec.field(default_factory=DataVersion)
    topic_queue_mapping_info_map: dict[str, Any] = {}
    topic_queue_mapping_detail_map: dict[str, Any] = {}
    mapping_data_version: DataVersion = msgspec.field(default_factory=DataVersion)


class RegisterBrokerBody(_Body):
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = msgspec.field(
        default_factory=TopicConfigSerializeWrapper
    )
    filter_server_list: list[str] = []


class KVTable(_Body):
    """REGISTER_BROKER response body: ordered-topic settings."""

    table: dict[str, str] = {}


class KVConfigSerializeWrapper(_Body):
    """A name server's ``kvConfig.json``: namespace -> key -> value."""

    config_table: dict[str, dict[str, str]] = {}


class QueueData(_Body):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


class BrokerData(_Body):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = {}
    zone_name: str | None = None
    enable_acting_master: bool = False

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)


class TopicRouteData(_Body):
    queue_datas: list[QueueData] = []
    broker_datas: list[BrokerData] = []
    filter_server_table: dict[str, list[str]] = {}
    order_topic_conf: str | None = None
    topic_queue_mapping_by_broker: dict[str, Any] | None = None


class ClusterInfo(_Body):
    broker_addr_table: dict[str, BrokerData] = {}
    cluster_addr_table: dict[str, list[str]] = {}

    def first_master(self) -> tuple[str, str] | None:
        """(address, cluster) of the master of the first broker name, clusters and names
        in sorted order; ``None`` when no master is registered."""
        for cluster, names in sorted(self.cluster_addr_table.items()):
            for name in sorted(names):
                broker = self.broker_addr_table.get(name)
                addr = broker.master_addr() if broker is not None else None
                if addr is not None:
                    return addr, cluster
        return None

    def cluster_of(self, addr: str) -> str:
        """The cluster of the broker at ``addr`` ("" when it is not registered)."""
        for cluster, names in self.cluster_addr_table.items():
            for name in names:
                broker = self.broker_addr_table.get(name)
                if broker is not None and addr in broker.broker_addrs.values():
                    return cluster
        return ""


class TopicList(_Body):
    topic_list: list[str] = []
    broker_addr: str | None = None


class ProducerData(_Body):
    group_name: str


class SubscriptionData(_Body):
    topic: str
    sub_string: str
    class_filter_mode: bool = False
    tags_set: list[str] = []
    code_set: list[int] = []
    sub_version: int = 0
    expression_type: str = "TAG"


class ConsumerData(_Body):
    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscription_data_set: list[SubscriptionData] = []
    unit_mode: bool = False


class HeartbeatData(_Body):
    client_id: str = msgspec.field(name="clientID")
    producer_data_set: list[ProducerData] = []
    consumer_data_set: list[ConsumerData] = []
    heartbeat_fingerprint: int = 0
    without_sub: bool = False


class ConsumerListBody(_Body):
    consumer_id_list: list[str] = []


class ConsumeMessageDirectlyResult(_Body):
    """A consumer's answer to CONSUME_MESSAGE_DIRECTLY (309): whether it is an orderly
    consumer, how its listener answered, the exception's text (``remark``) and how long
    the listener took (``spentTimeMills``, upstream's spelling)."""

    order: bool = False
    auto_commit: bool = True
    consume_result: CMResult | None = None
    remark: str | None = None
    spent_time_mills: int = 0

    def __str__(self) -> str:
        """mqadmin's text for it."""
        return (f"ConsumeMessageDirectlyResult [order={str(self.order).lower()}, "
                f"autoCommit={str(self.auto_commit).lower()}, "
                f"consumeResult={self.consume_result or 'null'}, "
                f"remark={'null' if self.remark is None else self.remark}, "
                f"spentTimeMills={self.spent_time_mills}]")


class MessageQueueData(_Body):
    """A message queue as JSON bodies carry it; see :meth:`of` / :meth:`to_queue`."""

    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def of(cls, mq: MessageQueue) -> MessageQueueData:
        return cls(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)

    def to_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


class LockBatchRequestBody(_Body):
    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueueData] = []


class UnlockBatchRequestBody(_Body):
    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueueData] = []


class LockBatchResponseBody(_Body):
    lock_ok_mq_set: list[MessageQueueData] = msgspec.field(default_factory=list,
                                                           name="lockOKMQSet")


# ---------------------------------------------------------------- encode / decode

_B = TypeVar("_B", bound=_Body)

_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder()

#: A JSON string (closing quote optional, so an unterminated one costs linear time), or a
#: bare numeric object key: ``{`` or ``,``, spaces, digits, spaces, ``:``.
_BARE_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"?|([{,]\s*)(-?[0-9]+)(\s*:)', re.DOTALL)


def _strip_none(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_strip_none(v) for v in obj]
    return obj


def encode_body(body: _Body) -> bytes:
    """Standard JSON: keys sorted, ``None`` members omitted, enums by name."""
    return encode_value(body)


def encode_value(value: Any) -> bytes:
    """Any value holding bodies (a map of them, a list) as :func:`encode_body` encodes
    a body."""
    return _encoder.encode(_strip_none(msgspec.to_builtins(value, str_keys=True)))


def _quote_bare_keys(data: bytes) -> bytes:
    def repl(m: re.Match[bytes]) -> bytes:
        if m.group(2) is None:
            return m.group(0)
        return m.group(1) + b'"' + m.group(2) + b'"' + m.group(3)

    return _BARE_KEY.sub(repl, data)


def _parse_json(data: bytes | bytearray | memoryview, what: str) -> Any:
    raw = bytes(data)
    try:
        try:
            return _decoder.decode(raw)
        except (msgspec.DecodeError, UnicodeDecodeError):
            fixed = _quote_bare_keys(raw)
            if fixed == raw:
                raise
            return _decoder.decode(fixed)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"{what} body is not JSON: {exc}") from None
    except RecursionError:
        raise RemoteProtocolError(f"{what} body nests too deeply") from None


_HAS_ENUM: dict[int, bool] = {}


def _has_enum(t: mi.Type) -> bool:
    """Whether an enum occurs under ``t`` (memoized: type trees live in ``_TYPE_INFO``)."""
    found = _HAS_ENUM.get(id(t))
    if found is None:
        found = _HAS_ENUM[id(t)] = _scan_enum(t, frozenset())
    return found


def _scan_enum(t: mi.Type, seen: frozenset[int]) -> bool:
    if isinstance(t, mi.EnumType):
        return True
    if isinstance(t, mi.StructType):
        if id(t.cls) in seen:
            return False
        inner = seen | {id(t.cls)}
        return any(_scan_enum(f.type, inner) for f in t.fields)
    if isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        return _scan_enum(t.item_type, seen)
    if isinstance(t, mi.DictType):
        return _scan_enum(t.value_type, seen)
    if isinstance(t, mi.UnionType):
        return any(_scan_enum(m, seen) for m in t.types)
    return False


def _ordinals_to_names(t: mi.Type, raw: Any) -> Any:
    """Replace enum ordinals in the untyped tree ``raw`` with the enum names."""
    if isinstance(t, mi.EnumType):
        if isinstance(raw, int) and not isinstance(raw, bool):
            members = list(t.cls)
            if 0 <= raw < len(members):
                return members[raw].value
        return raw
    if isinstance(t, mi.StructType) and isinstance(raw, dict):
        for f in t.fields:
            if f.encode_name in raw and _has_enum(f.type):
                raw[f.encode_name] = _ordinals_to_names(f.type, raw[f.encode_name])
        return raw
    if isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        if isinstance(raw, list) and _has_enum(t.item_type):
            return [_ordinals_to_names(t.item_type, v) for v in raw]
        return raw
    if isinstance(t, mi.DictType):
        if isinstance(raw, dict) and _has_enum(t.value_type):
            return {k: _ordinals_to_names(t.value_type, v) for k, v in raw.items()}
        return raw
    if isinstance(t, mi.UnionType):
        for member in t.types:
            if _has_enum(member):
                raw = _ordinals_to_names(member, raw)
    return raw


_TYPE_INFO: dict[type[Any], mi.Type] = {}


def decode_body(data: bytes | bytearray | memoryview, cls: type[_B]) -> _B:
    """Decode a body leniently (see the module docstring) as ``cls``."""
    raw = _parse_json(data, cls.__name__)
    info = _TYPE_INFO.get(cls)
    if info is None:
        info = _TYPE_INFO[cls] = mi.type_info(cls)
    raw = _ordinals_to_names(info, raw)
    try:
        return msgspec.convert(raw, cls, strict=False, str_keys=True)
    except msgspec.ValidationError as exc:
        raise RemoteProtocolError(f"{cls.__name__} body is invalid: {exc}") from None


# ---------------------------------------------------------------- compressed REGISTER_BROKER

_I32 = struct.Struct(">i")

#: Bound on the inflated size of a compressed REGISTER_BROKER body.
MAX_REGISTER_BODY = 64 * 1024 * 1024


def _topic_line(tc: TopicConfig) -> bytes:
    """Java ``TopicConfig.encode``: ``name read write perm filterType attributesJson``."""
    attrs = _encoder.encode(tc.attributes).decode()
    return (f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} "
            f"{tc.topic_filter_type.value} {attrs}").encode()


def _parse_topic_line(line: str) -> TopicConfig:
    parts = line.split(" ", 5)
    if len(parts) < 5:
        raise RemoteProtocolError(f"register body: topic line {line[:80]!r} has < 5 fields")
    raw: dict[str, Any] = {
        "topicName": parts[0], "readQueueNums": parts[1], "writeQueueNums": parts[2],
        "perm": parts[3], "topicFilterType": parts[4],
    }
    if len(parts) == 6 and parts[5] != "null":
        raw["attributes"] = _parse_json(parts[5].encode(), "topic attributes")
    try:
        return msgspec.convert(raw, TopicConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise RemoteProtocolError(f"register body: topic line {line[:80]!r}: {exc}") from None


def encode_register_body(body: RegisterBrokerBody, *, compressed: bool = False,
                         broker_version: int = V5_0_0) -> bytes:
    """REGISTER_BROKER body: JSON, or with ``compressed`` the zlib stream whose plaintext is

    ``int len + DataVersion JSON``, ``int count`` then per topic ``int len + topic line``
    (space-separated ``name read write perm filterType attributesJson``; ``topicSysFlag``
    and ``order`` are not carried), ``int len + filter-server JSON array``, and from
    broker version 413 on ``int count`` + per entry ``int len + TopicQueueMappingInfo``.
    """
    if not compressed:
        return encode_body(body)
    wrapper = body.topic_config_serialize_wrapper
    out = bytearray()

    def put(chunk: bytes) -> None:
        out.extend(_I32.pack(len(chunk)))
        out.extend(chunk)

    put(encode_body(wrapper.data_version))
    out.extend(_I32.pack(len(wrapper.topic_config_table)))
    for tc in wrapper.topic_config_table.values():
        put(_topic_line(tc))
    put(_encoder.encode(body.filter_server_list))
    if broker_version >= V5_0_0:
        mapping = wrapper.topic_queue_mapping_info_map
        out.extend(_I32.pack(len(mapping)))
        for info in mapping.values():
            put(_encoder.encode(info))
    return zlib.compress(bytes(out), 9)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def read_int(self) -> int:
        if self.remaining() < 4:
            raise RemoteProtocolError("register body: truncated length field")
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def read_chunk(self) -> bytes:
        n = self.read_int()
        if n < 0 or n > self.remaining():
            raise RemoteProtocolError(f"register body: chunk length {n} overruns the body")
        self.pos += n
        return self.data[self.pos - n : self.pos]


def decode_register_body(data: bytes | bytearray | memoryview, *, compressed: bool,
                         broker_version: int = V5_0_0,
                         max_size: int = MAX_REGISTER_BODY) -> RegisterBrokerBody:
    """Decode a REGISTER_BROKER body (see :func:`encode_register_body`)."""
    if not compressed:
        return decode_body(data, RegisterBrokerBody)
    try:
        plain = decompress(data, CompressionType.ZLIB, max_size)
    except CorruptRecord as exc:
        raise RemoteProtocolError(f"register body: {exc.reason}") from None
    reader = _Reader(plain)
    version = decode_body(reader.read_chunk(), DataVersion)
    count = reader.read_int()
    if count < 0 or count > reader.remaining() // 4:
        raise RemoteProtocolError(f"register body: topic count {count} is impossible")
    table: dict[str, TopicConfig] = {}
    for _ in range(count):
        try:
            line = reader.read_chunk().decode("utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError("register body: topic line is not UTF-8") from None
        tc = _parse_topic_line(line)
        table[tc.topic_name] = tc
    filters = _parse_json(reader.read_chunk(), "filter server list")
    if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
        raise RemoteProtocolError("register body: filter server list is not a string array")
    mapping: dict[str, Any] = {}
    if broker_version >= V5_0_0 and reader.remaining():
        for i in range(reader.read_int()):
            info = _parse_json(reader.read_chunk(), "TopicQueueMappingInfo")
            name = info.get("topic") if isinstance(info, dict) else None
            mapping[name if isinstance(name, str) else str(i)] = info
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table=table, data_version=version, topic_queue_mapping_info_map=mapping
    )
    return RegisterBrokerBody(topic_config_serialize_wrapper=wrapper, filter_server_list=filters)

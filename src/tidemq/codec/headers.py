"""Every custom header TideMQ reads or writes, declared once (docs/reference/remoting.md §2).

Each class is a schema (:mod:`tidemq.codec.schema`): field name, type, default, and the
ext key when it is not the camelCase of the field name. Decoding and encoding are derived:
``Header.from_ext(cmd.ext_fields)`` and ``header.to_ext()``.

Inheritance mirrors the Java classes so that the common optional keys appear where the
peer may send them (§2.2): :class:`RpcRequestHeader` carries ``ns``, ``nsd``, ``bname``,
``oway``; :class:`TopicRequestHeader` adds ``lo``.

SEND_MESSAGE_V2, SEND_BATCH_MESSAGE and the request-reply codes use the one-letter keys of
§2.7; :class:`SendMessageRequestHeaderV2` is the V1 schema re-keyed, so both are the same
type to the broker and ``h.convert(SendMessageRequestHeaderV2)`` switches forms.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, cast

from tidemq.codec.command import RequestCode
from tidemq.codec.schema import I64, Header, Key
from tidemq.errors import RemoteProtocolError
from tidemq.formats.record.native import compiled

__all__ = [
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "ROUTE_MAY_BE_INCOMPLETE",
    "AclRequestHeader",
    "BrokerHeartbeatRequestHeader",
    "CheckTransactionStateRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteAclRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "HeartbeatRequestHeader",
    "HeartbeatResponseHeader",
    "KVConfigRequestHeader",
    "ListAclsRequestHeader",
    "ListUsersRequestHeader",
    "LockBatchMqRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PutKVConfigRequestHeader",
    "QueryConsumeQueueRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "ResetOffsetRequestHeader",
    "RpcRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendFields",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "TopicRequestHeader",
    "UnRegisterBrokerRequestHeader",
    "UnlockBatchMqRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "UserRequestHeader",
    "decode_send_fields",
    "decode_send_header",
    "format_attributes",
    "parse_attributes",
    "py_decode_send_fields",
]


# ---------------------------------------------------------------- common bases


class RpcRequestHeader(Header):
    """Optional keys every Java ``RpcRequestHeader`` may carry; a broker may ignore them."""

    namespace: Annotated[str | None, Key("ns")] = None
    namespace_applied: Annotated[bool | None, Key("nsd")] = None
    broker_name: Annotated[str | None, Key("bname")] = None
    oneway: Annotated[bool | None, Key("oway")] = None


class TopicRequestHeader(RpcRequestHeader):
    """Adds ``lo``: static-topic "logic" flag; explicit false means "already rewritten"."""

    logic: Annotated[bool | None, Key("lo")] = None


# ---------------------------------------------------------------- send (§2.7)


class SendMessageRequestHeader(TopicRequestHeader):
    """SEND_MESSAGE (10). ``batch`` accepts ``"1"`` as the C++ client sends it (§5.3)."""

    broker_name: Annotated[str | None, Key("bname", ("brokerName",))] = None
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: I64
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    batch: Annotated[bool, Key(accept_one=True)] = False


_V2_KEYS: dict[str, str | tuple[str, ...]] = {
    "producer_group": "a",
    "topic": "b",
    "default_topic": "c",
    "default_topic_queue_nums": "d",
    "queue_id": "e",
    "sys_flag": "f",
    "born_timestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsume_times": "j",
    "unit_mode": "k",
    "max_reconsume_times": "l",
    "batch": "m",
    "broker_name": ("n", "bname"),
}


class SendMessageRequestHeaderV2(SendMessageRequestHeader, keys=_V2_KEYS):
    """SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), 324/325: V1 fields, keys ``a``..``n``."""


class SendMessageResponseHeader(Header):
    """Send response. ``MSG_REGION`` and ``TRACE_ON`` default to the Java broker's values
    so that a success response always carries ext fields (§2.7)."""

    msg_id: str
    queue_id: int
    queue_offset: I64
    transaction_id: str | None = None
    batch_uniq_id: str | None = None
    recall_handle: str | None = None
    msg_region: Annotated[str, Key("MSG_REGION")] = "DefaultRegion"
    trace_on: Annotated[bool, Key("TRACE_ON")] = True


_SEND_CODES_V2 = frozenset(
    {
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    }
)


def decode_send_header(code: int, ext: Mapping[str, str]) -> SendMessageRequestHeader:
    """The send header of a request with ``code``: V1 keys for 10 and 324, short keys else."""
    if code in _SEND_CODES_V2:
        return SendMessageRequestHeaderV2.from_ext(ext)
    return SendMessageRequestHeader.from_ext(ext)


#: The send-header fields a plain single send needs: topic, queue id, sysFlag, born
#: timestamp, flag, properties, reconsumeTimes (0 when absent).
SendFields = tuple[str, int, int, int, int, str | None, int]

# Per form: the required keys (one C call reads them all), then the optional ones read.
_FAST_KEYS = {
    False: (operator.itemgetter("producerGroup", "topic", "defaultTopic",
                                "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
                                "flag"),
            ("properties", "reconsumeTimes", "maxReconsumeTimes", "batch")),
    True: (operator.itemgetter("a", "b", "c", "d", "e", "f", "g", "h"), ("i", "j", "l", "m")),
}
#: Per form, the twelve keys the compiled read takes: the required ones, then the others.
_KEYS = {
    False: ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId",
            "sysFlag", "bornTimestamp", "flag", *_FAST_KEYS[False][1]),
    True: (*"abcdefgh", *_FAST_KEYS[True][1]),
}
_compiled_fields = compiled("send_fields")


def decode_send_fields(code: int, ext: Mapping[str, str], *, batch: bool = False
                       ) -> SendFields | None:
    """The fields of a plain single send, read straight from ``ext``, or ``None``.

    ``None`` means "not the plain case": a required key missing, a number that is not
    plain ASCII digits within 9 (int) or 18 (long) digits -- negative queue ids included --
    an unparsable optional number, or ``batch`` set (unless ``batch``: the caller reads a
    batch send, whatever the flag says; a boolean never fails to decode). Whenever this
    returns fields, they equal :func:`decode_send_header`'s (a golden test holds the two
    together); for ``None`` the caller decodes with the schema, which also names what is
    wrong. A dict (what the header codecs give) is read by the compiled module when it is
    built; :func:`py_decode_send_fields` is its twin.
    """
    if _compiled_fields is not None and type(ext) is dict:
        return cast("SendFields | None",
                    _compiled_fields(_KEYS[code in _SEND_CODES_V2], ext, batch))
    return py_decode_send_fields(code, ext, batch=batch)


def py_decode_send_fields(code: int, ext: Mapping[str, str], *, batch: bool = False
                          ) -> SendFields | None:
    """:func:`decode_send_fields` in Python."""
    required, (ki, kj, kl, km) = _FAST_KEYS[code in _SEND_CODES_V2]
    try:
        _group, topic, _default, nums, qid, sys_flag, born, flag = required(ext)
    except KeyError:
        return None
    if not (0 < len(qid) < 10 and 0 < len(sys_flag) < 10 and 0 < len(flag) < 10
            and 0 < len(nums) < 10 and 0 < len(born) < 19):
        return None
    digits = qid + sys_flag + flag + nums + born
    if not (digits.isdigit() and digits.isascii()):
        return None
    get = ext.get
    reconsume = 0
    extra = get(kj)
    if extra is not None:
        if not (0 < len(extra) < 10 and extra.isdigit() and extra.isascii()):
            return None
        reconsume = int(extra)
    extra = get(kl)
    if extra is not None and not (0 < len(extra) < 10 and extra.isdigit() and extra.isascii()):
        return None
    flag_text = None if batch else get(km)
    if flag_text is not None and (flag_text == "1" or flag_text.lower() == "true"):
        return None
    return (topic, int(qid), int(sys_flag), int(born), int(flag), get(ki), reconsume)


# ---------------------------------------------------------------- pull (§2.8)


class PullMessageRequestHeader(TopicRequestHeader):
    """PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361)."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: I64
    max_msg_nums: int
    sys_flag: int
    commit_offset: I64
    suspend_timeout_millis: I64
    subscription: str | None = None
    sub_version: I64
    expression_type: str | None = None
    max_msg_bytes: int | None = None
    request_source: int | None = None
    proxy_froward_client_id: str | None = None  # sic, the upstream key


class PullMessageResponseHeader(Header):
    suggest_which_broker_id: I64
    next_begin_offset: I64
    min_offset: I64
    max_offset: I64
    offset_delta: I64 | None = None
    topic_sys_flag: int | None = None
    group_sys_flag: int | None = None
    forbidden_type: int | None = None


# ---------------------------------------------------------------- offsets (§2.9)


class QueryConsumerOffsetRequestHeader(TopicRequestHeader):
    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None


class QueryConsumerOffsetResponseHeader(Header):
    offset: I64


class UpdateConsumerOffsetRequestHeader(TopicRequestHeader):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: I64


class GetMaxOffsetRequestHeader(TopicRequestHeader):
    topic: str
    queue_id: int
    committed: bool = True


class GetMaxOffsetResponseHeader(Header):
    offset: I64


class GetMinOffsetRequestHeader(TopicRequestHeader):
    topic: str
    queue_id: int


class GetMinOffsetResponseHeader(Header):
    offset: I64


class GetEarliestMsgStoretimeRequestHeader(TopicRequestHeader):
    topic: str
    queue_id: int


class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: I64


class QueryConsumeQueueRequestHeader(TopicRequestHeader):
    """QUERY_CONSUME_QUEUE (321): ``count`` entries of one queue from ``index``; with
    ``consumer_group``, that group's subscription too."""

    topic: str = ""
    queue_id: int
    index: I64
    count: int = 10
    consumer_group: str | None = None


class SearchOffsetRequestHeader(TopicRequestHeader):
    """``boundary_type`` is "LOWER" (default) or "UPPER", case-insensitive."""

    topic: str
    queue_id: int
    timestamp: I64
    boundary_type: str | None = None


class SearchOffsetResponseHeader(Header):
    offset: I64


# ---------------------------------------------------------------- topics (§2.3, §2.12)


class CreateTopicRequestHeader(TopicRequestHeader):
    """UPDATE_AND_CREATE_TOPIC (17), also 513. ``attributes``: see :func:`parse_attributes`."""

    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int | None = None
    order: bool = False
    attributes: str | None = None
    force: bool | None = None


class DeleteTopicRequestHeader(TopicRequestHeader):
    """DELETE_TOPIC_IN_BROKER (215)."""

    topic: str


class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV (216)."""

    topic: str
    cluster_name: str | None = None


class GetRouteInfoRequestHeader(TopicRequestHeader):
    """GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str
    accept_standard_json_only: bool | None = None


#: An ext field of GET_ROUTEINFO_BY_TOPIC answers (TideMQ; other clients ignore it):
#: ``"true"`` while the name server has just started and brokers may not have registered
#: again yet, so the route (or TOPIC_NOT_EXIST) may lack brokers that are alive.
ROUTE_MAY_BE_INCOMPLETE = "routeMayBeIncomplete"


class GetTopicConfigRequestHeader(TopicRequestHeader):
    """GET_TOPIC_CONFIG (351)."""

    topic: str


class GetTopicStatsInfoRequestHeader(TopicRequestHeader):
    """GET_TOPIC_STATS_INFO (202)."""

    topic: str


class GetConsumeStatsRequestHeader(TopicRequestHeader):
    """GET_CONSUME_STATS (208)."""

    consumer_group: str
    topic: str | None = None


def parse_attributes(text: str | None) -> dict[str, str | None]:
    """Parse ``+key=value,-key`` (Java ``AttributeParser``): ``None`` marks a deletion.

    Malformed items or a repeated key raise :class:`RemoteProtocolError` naming the field.
    """
    out: dict[str, str | None] = {}
    if not text:
        return out
    for item in text.split(","):
        key: str
        value: str | None
        if item.startswith("+") and "=" in item:
            key, _, value = item[1:].partition("=")
        elif item.startswith("-") and "=" not in item:
            key, value = item[1:], None
        else:
            raise RemoteProtocolError(f"attributes: malformed item {item!r}")
        if not key or key in out:
            raise RemoteProtocolError(f"attributes: empty or repeated key in {item!r}")
        out[key] = value
    return out


def format_attributes(attributes: Mapping[str, str | None]) -> str:
    """The inverse of :func:`parse_attributes`."""
    return ",".join(f"+{k}={v}" if v is not None else f"-{k}" for k, v in attributes.items())


# ---------------------------------------------------------------- broker <-> name server (§2.4)


class RegisterBrokerRequestHeader(Header):
    """REGISTER_BROKER (103). ``zone_name`` is read from ext by name upstream."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: I64
    heartbeat_timeout_millis: I64 | None = None
    enable_acting_master: bool | None = None
    compressed: bool = False
    body_crc32: int = 0
    zone_name: str | None = None


class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


class UnRegisterBrokerRequestHeader(Header):
    """UNREGISTER_BROKER (104)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: I64


class PutKVConfigRequestHeader(Header):
    """PUT_KV_CONFIG (100)."""

    namespace: str
    key: str
    value: str


class KVConfigRequestHeader(Header):
    """GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102)."""

    namespace: str
    key: str


class GetKVConfigResponseHeader(Header):
    """A successful GET_KV_CONFIG (101) answer."""

    value: str | None = None


class GetKVListByNamespaceRequestHeader(Header):
    """GET_KVLIST_BY_NAMESPACE (219)."""

    namespace: str


class UserRequestHeader(Header):
    """AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER, AUTH_GET_USER (3001-3004)."""

    username: str


class ListUsersRequestHeader(Header):
    """AUTH_LIST_USER (3005): users whose name contains ``filter``."""

    filter: str | None = None


class AclRequestHeader(Header):
    """AUTH_CREATE_ACL, AUTH_UPDATE_ACL, AUTH_GET_ACL (3006, 3007, 3009): ``User:name``."""

    subject: str


class DeleteAclRequestHeader(Header):
    """AUTH_DELETE_ACL (3008): the subject's whole ACL, or only its entries on
    ``resource``."""

    subject: str
    policy_type: str | None = None
    resource: str | None = None


class ListAclsRequestHeader(Header):
    """AUTH_LIST_ACL (3010)."""

    subject_filter: str | None = None
    resource_filter: str | None = None


class BrokerHeartbeatRequestHeader(Header):
    """BROKER_HEARTBEAT (904); ``heartbeatTimeoutMills`` is the upstream spelling."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: I64 | None = None
    epoch: int | None = None
    max_offset: I64 | None = None
    confirm_offset: I64 | None = None
    heartbeat_timeout_millis: Annotated[I64 | None, Key("heartbeatTimeoutMills")] = None
    election_priority: int | None = None


class QueryDataVersionRequestHeader(Header):
    """QUERY_DATA_VERSION (322); the body is the broker's DataVersion."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: I64


class QueryDataVersionResponseHeader(Header):
    changed: bool | None = None


# ---------------------------------------------------------------- clients (§2.6, §2.10, §2.13)


class HeartbeatRequestHeader(RpcRequestHeader):
    """HEART_BEAT (34): only the common keys; the body is HeartbeatData."""


class HeartbeatResponseHeader(Header):
    is_support_heart_beat_v2: Annotated[bool | None, Key("IS_SUPPORT_HEART_BEAT_V2")] = None
    is_sub_change: Annotated[bool | None, Key("IS_SUB_CHANGE")] = None


class UnregisterClientRequestHeader(RpcRequestHeader):
    """UNREGISTER_CLIENT (35); the C++ client sends ``consumerGroup`` as ``""``."""

    client_id: Annotated[str, Key("clientID")]
    producer_group: str | None = None
    consumer_group: str | None = None


class GetConsumerListByGroupRequestHeader(RpcRequestHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38)."""

    consumer_group: str


class NotifyConsumerIdsChangedRequestHeader(Header):
    """NOTIFY_CONSUMER_IDS_CHANGED (40), broker -> client, oneway."""

    consumer_group: str


class LockBatchMqRequestHeader(RpcRequestHeader):
    """LOCK_BATCH_MQ (41): only the common keys; the body says what to lock."""


class UnlockBatchMqRequestHeader(RpcRequestHeader):
    """UNLOCK_BATCH_MQ (42)."""


# ---------------------------------------------------------------- retry and lookup (§2.11, §2.14)


class ConsumerSendMsgBackRequestHeader(RpcRequestHeader):
    """CONSUMER_SEND_MSG_BACK (36); ``offset`` is the record's commit-log offset."""

    offset: I64
    group: str
    delay_level: int
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


# ---------------------------------------------------------------- transactions


class EndTransactionRequestHeader(RpcRequestHeader):
    """END_TRANSACTION (37), producer -> broker: the half message at commit-log offset
    ``commit_log_offset`` (half-queue offset ``tran_state_table_offset``) is committed
    (``commit_or_rollback`` 8), rolled back (12) or still unknown (0).
    ``from_transaction_check``: the answer to a CHECK_TRANSACTION_STATE. ``topic`` (sent
    by RocketMQ 5 clients) names the real topic, for the ACL."""

    producer_group: str
    tran_state_table_offset: I64
    commit_log_offset: I64
    commit_or_rollback: int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None
    topic: str | None = None


class CheckTransactionStateRequestHeader(RpcRequestHeader):
    """CHECK_TRANSACTION_STATE (39), broker -> producer, oneway; the body is the half
    message (as a stored record, with its real topic and queue)."""

    tran_state_table_offset: I64
    commit_log_offset: I64
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None


class ViewMessageRequestHeader(RpcRequestHeader):
    """VIEW_MESSAGE_BY_ID (33)."""

    offset: I64
    topic: str | None = None


class QueryMessageRequestHeader(TopicRequestHeader):
    """QUERY_MESSAGE (12); ``_UNIQUE_KEY_QUERY`` true when ``key`` is a UNIQ_KEY."""

    topic: str
    key: str
    max_num: int
    begin_timestamp: I64
    end_timestamp: I64
    unique_key_query: Annotated[bool | None, Key("_UNIQUE_KEY_QUERY")] = None


class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: I64
    index_last_update_phyoffset: I64


# ---------------------------------------------------------------- consumer-group admin


class DeleteSubscriptionGroupRequestHeader(RpcRequestHeader):
    """DELETE_SUBSCRIPTIONGROUP (207); ``cleanOffset`` also drops the group's offsets."""

    group_name: str
    clean_offset: bool = False


class ResetOffsetRequestHeader(TopicRequestHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222), admin -> broker, and RESET_CONSUMER_CLIENT_OFFSET
    (220), broker -> consumer (oneway). ``timestamp`` -1 means the max offset; 5.x admin
    tools may name one ``queueId`` (-1: all) and an explicit ``offset``."""

    topic: str
    group: str
    timestamp: I64
    is_force: bool = False
    queue_id: int = -1
    offset: I64 | None = None


class ConsumeMessageDirectlyResultRequestHeader(TopicRequestHeader):
    """CONSUME_MESSAGE_DIRECTLY (309), admin -> broker -> consumer. ``msgId`` is the
    message's offset id on the broker asked; the broker fills in ``brokerName`` (its own
    name), ``topicSysFlag`` and ``groupSysFlag`` before it passes the request on."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    origin_broker: Annotated[str | None, Key("brokerName")] = None
    topic: str | None = None
    topic_sys_flag: int | None = None
    group_sys_flag: int | None = None


# ---------------------------------------------------------------- registries

#: The header schema of each request code that has one.
REQUEST_HEADERS: dict[int, type[Header]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeaderV2,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeaderV2,
    RequestCode.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeaderV2,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.LITE_PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RequestCode.QUERY_CONSUME_QUEUE: QueryConsumeQueueRequestHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC: CreateTopicRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: DeleteTopicFromNamesrvRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RequestCode.GET_TOPIC_CONFIG: GetTopicConfigRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader,
    RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
    RequestCode.UNREGISTER_BROKER: UnRegisterBrokerRequestHeader,
    RequestCode.BROKER_HEARTBEAT: BrokerHeartbeatRequestHeader,
    RequestCode.QUERY_DATA_VERSION: QueryDataVersionRequestHeader,
    RequestCode.HEART_BEAT: HeartbeatRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    RequestCode.LOCK_BATCH_MQ: LockBatchMqRequestHeader,
    RequestCode.UNLOCK_BATCH_MQ: UnlockBatchMqRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    RequestCode.DELETE_SUBSCRIPTIONGROUP: DeleteSubscriptionGroupRequestHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    RequestCode.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    RequestCode.PUT_KV_CONFIG: PutKVConfigRequestHeader,
    RequestCode.GET_KV_CONFIG: KVConfigRequestHeader,
    RequestCode.DELETE_KV_CONFIG: KVConfigRequestHeader,
    RequestCode.GET_KVLIST_BY_NAMESPACE: GetKVListByNamespaceRequestHeader,
    RequestCode.AUTH_CREATE_USER: UserRequestHeader,
    RequestCode.AUTH_UPDATE_USER: UserRequestHeader,
    RequestCode.AUTH_DELETE_USER: UserRequestHeader,
    RequestCode.AUTH_GET_USER: UserRequestHeader,
    RequestCode.AUTH_LIST_USER: ListUsersRequestHeader,
    RequestCode.AUTH_CREATE_ACL: AclRequestHeader,
    RequestCode.AUTH_UPDATE_ACL: AclRequestHeader,
    RequestCode.AUTH_DELETE_ACL: DeleteAclRequestHeader,
    RequestCode.AUTH_GET_ACL: AclRequestHeader,
    RequestCode.AUTH_LIST_ACL: ListAclsRequestHeader,
}

#: The header schema of a *successful* response to each request code that has one.
RESPONSE_HEADERS: dict[int, type[Header]] = {
    RequestCode.SEND_MESSAGE: SendMessageResponseHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageResponseHeader,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
    RequestCode.SEND_REPLY_MESSAGE: SendMessageResponseHeader,
    RequestCode.SEND_REPLY_MESSAGE_V2: SendMessageResponseHeader,
    RequestCode.PULL_MESSAGE: PullMessageResponseHeader,
    RequestCode.LITE_PULL_MESSAGE: PullMessageResponseHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerResponseHeader,
    RequestCode.QUERY_DATA_VERSION: QueryDataVersionResponseHeader,
    RequestCode.HEART_BEAT: HeartbeatResponseHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageResponseHeader,
    RequestCode.GET_KV_CONFIG: GetKVConfigResponseHeader,
}

"""Consumer- and producer-group administration, as mqadmin's group commands do it.

Every operation takes a started :class:`~tidemq.client.admin.AdminClient` and returns
plain values (the frozen dataclasses below, dicts) that a CLI prints as a table or JSON.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`consume_progress`         208 GET_CONSUME_STATS on every master of the topic (or of
                                 the cluster when no topic is given)
:func:`group_names`              201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG on every master
:func:`group_summary`            203 and 208 for one group
:func:`consumer_connection`      203 GET_CONSUMER_CONNECTION_LIST on one broker, or on
                                 every master at once, merged
:func:`producer_connection`      204 GET_PRODUCER_CONNECTION_LIST on the topic's masters
:func:`broker_consume_stats`     201, then 208 per group, on one broker (and 21
                                 GET_ALL_TOPIC_CONFIG for the ordered topics only)
:func:`reset_offset`             222 INVOKE_BROKER_TO_RESET_OFFSET on the topic's masters
:func:`clone_group_offset`       14 QUERY_CONSUMER_OFFSET of the source group, 15
                                 UPDATE_CONSUMER_OFFSET for the destination, per queue
:func:`update_group`             200 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP on the targets
:func:`delete_group`             207 DELETE_SUBSCRIPTIONGROUP on the targets
:func:`group_configs`            201 on one broker
:func:`running_info`             307 GET_CONSUMER_RUNNING_INFO on a broker the consumer is
                                 connected to, which asks the consumer
:func:`consume_message_directly`  33 VIEW_MESSAGE_BY_ID or 12 QUERY_MESSAGE to find the
                                 message, then 309 CONSUME_MESSAGE_DIRECTLY on the broker
                                 that stores it, which has the consumer consume it
===============================  ==========================================================
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tidemq.client import offsets as ofs
from tidemq.client import request_deadline
from tidemq.client.errors import NoRouteError
from tidemq.codec import fastjson
from tidemq.codec.bodies import (
    ConsumeMessageDirectlyResult,
    TopicConfigSerializeWrapper,
    decode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    ResetOffsetRequestHeader,
)
from tidemq.errors import BrokerResponseError, ResponseCode, TideMQError, error_for_code
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.record import pack_host
from tidemq.types import MessageQueue

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = [
    "Connections",
    "ConsumeProgress",
    "GroupSummary",
    "QueueProgress",
    "ResetRow",
    "broker_consume_stats",
    "clone_group_offset",
    "consume_message_directly",
    "consume_progress",
    "consumer_connection",
    "delete_group",
    "group_configs",
    "group_names",
    "group_summary",
    "producer_connection",
    "reset_offset",
    "running_info",
    "targets",
    "update_group",
]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue of a group's progress; ``last_timestamp`` is the store time (epoch ms)
    of the last message the group consumed, 0 when none; ``pull_offset`` is where its
    pulls have reached (the consumer offset when the broker does not say)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    diff: int
    last_timestamp: int
    pull_offset: int = -1

    @property
    def inflight(self) -> int:
        """Messages pulled but not committed yet (mqadmin's ``#Inflight``)."""
        return max(0, self.pull_offset - self.consumer_offset)


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeProgress:
    """A group's progress over every queue it consumes (or of one topic)."""

    group: str
    queues: list[QueueProgress]
    consume_tps: float

    @property
    def diff_total(self) -> int:
        return sum(q.diff for q in self.queues)

    @property
    def inflight_total(self) -> int:
        return sum(q.inflight for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class Connections:
    """The clients of a group (GET_CONSUMER_CONNECTION_LIST / ..._PRODUCER_...).
    ``clients`` rows hold ``clientId``, ``clientAddr``, ``language``, ``version``."""

    clients: list[dict[str, Any]]
    subscriptions: dict[str, str] = dataclasses.field(default_factory=dict)
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSummary:
    """One line of ``consumerProgress`` without a group: who is online, and the lag."""

    group: str
    count: int
    version: str
    consume_type: str
    message_model: str
    consume_tps: float
    diff_total: int


@dataclasses.dataclass(frozen=True, slots=True)
class ResetRow:
    """Where a reset moved one queue."""

    broker_name: str
    queue_id: int
    offset: int


def _json_body(response: RemotingCommand, what: str, addr: str) -> Any:
    try:
        return fastjson.loads(bytes(response.full_body()) or b"{}")
    except ValueError as exc:
        raise error_for_code(ResponseCode.SYSTEM_ERROR, f"{what} from {addr} is not JSON: "
                             f"{exc}", address=addr) from None


async def targets(admin: AdminClient, *, broker_addr: str | None = None,
                  cluster: str | None = None) -> list[str]:
    """The broker addresses a write goes to: ``broker_addr``, else every master of
    ``cluster`` (default: of every cluster)."""
    if broker_addr and cluster:
        raise ValueError("give a broker address or a cluster, not both")
    if broker_addr:
        return [broker_addr]
    found = sorted((await admin.masters(cluster)).values())
    if not found:
        raise NoRouteError(cluster or "", "no master broker")
    return found


async def _topic_masters(admin: AdminClient, topic: str) -> list[str]:
    route = await admin.instance.routes.get(topic, refresh=True)
    return sorted(set(route.master_addresses.values()))


async def _ask(admin: AdminClient, addr: str, cmd: RemotingCommand,
               timeout: float | None) -> RemotingCommand:
    """``cmd``'s successful answer (``timeout`` seconds, None: the client's default)."""
    response = await admin.instance.request(addr, cmd, timeout)
    ofs.check_success(response, address=addr)
    return response


async def _stats_of(admin: AdminClient, addr: str, group: str, topic: str | None, *,
                    timeout: float | None = None) -> tuple[list[QueueProgress], float]:
    header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)
    response = await _ask(admin, addr, RemotingCommand.request(
        RequestCode.GET_CONSUME_STATS, header.to_ext()), timeout)
    body = _json_body(response, "GET_CONSUME_STATS answer", addr)
    rows = [QueueProgress(r["topic"], r["brokerName"], int(r["queueId"]),
                          int(r["brokerOffset"]), int(r["consumerOffset"]), int(r["lag"]),
                          int(r.get("lastTimestamp", 0)),
                          int(r.get("pullOffset", r["consumerOffset"])))
            for r in body.get("offsetTable", [])]
    return rows, float(body.get("consumeTps", 0.0))


async def consume_progress(admin: AdminClient, group: str, *, topic: str | None = None,
                           cluster: str | None = None) -> ConsumeProgress:
    """``group``'s offsets against each queue's end, on the masters of ``topic`` (when
    given) or of ``cluster`` (default: every cluster), sorted by topic, broker, queue."""
    addrs = (await _topic_masters(admin, topic) if topic
             else sorted((await admin.masters(cluster)).values()))
    rows: list[QueueProgress] = []
    tps = 0.0
    for addr in addrs:
        got, rate = await _stats_of(admin, addr, group, topic)
        rows.extend(got)
        tps += rate
    rows.sort(key=lambda r: (r.topic, r.broker_name, r.queue_id))
    return ConsumeProgress(group, rows, tps)


async def group_configs(admin: AdminClient, addr: str, *, timeout: float | None = None
                        ) -> dict[str, dict[str, Any]]:
    """Every subscription group config of the broker at ``addr``, by name."""
    response = await _ask(admin, addr, RemotingCommand.request(
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), timeout)
    body = _json_body(response, "GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer", addr)
    table = body.get("subscriptionGroupTable", {})
    return dict(sorted(table.items())) if isinstance(table, dict) else {}


async def group_names(admin: AdminClient, cluster: str | None = None) -> list[str]:
    """Every consumer group configured on a master of ``cluster`` (default: every one)."""
    names: set[str] = set()
    for addr in sorted((await admin.masters(cluster)).values()):
        names.update(await group_configs(admin, addr))
    return sorted(names)


async def _connections_at(admin: AdminClient, addr: str, group: str) -> Connections | None:
    cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                  {"consumerGroup": group})
    response = await admin.instance.request(addr, cmd)
    if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
        return None
    ofs.check_success(response, address=addr)
    body = _json_body(response, "GET_CONSUMER_CONNECTION_LIST answer", addr)
    return Connections(sorted(body.get("connectionSet", []), key=lambda c: c["clientId"]),
                       dict(sorted(body.get("subscriptionTable", {}).items())),
                       body.get("consumeType", ""), body.get("messageModel", ""),
                       body.get("consumeFromWhere", ""))


async def consumer_connection(admin: AdminClient, group: str, *,
                              broker_addr: str | None = None) -> Connections:
    """The online consumers of ``group`` as ``broker_addr`` (default: every master, merged)
    knows them; CONSUMER_NOT_ONLINE when none is."""
    addrs = [broker_addr] if broker_addr else sorted((await admin.masters()).values())
    merged: dict[str, dict[str, Any]] = {}
    first: Connections | None = None
    for found in request_deadline.answers(await asyncio.gather(
            *(_connections_at(admin, addr, group) for addr in addrs), return_exceptions=True)):
        if found is None:
            continue
        first = first or found
        for client in found.clients:
            merged.setdefault(client["clientId"], client)
    if first is None:
        raise error_for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                             f"the consumer group[{group}] not online",
                             address=",".join(addrs))
    return dataclasses.replace(first, clients=[merged[k] for k in sorted(merged)])


async def producer_connection(admin: AdminClient, group: str, topic: str) -> Connections:
    """The producers of ``group`` connected to the masters of ``topic``."""
    merged: dict[str, dict[str, Any]] = {}

    async def one(addr: str) -> list[dict[str, Any]]:
        cmd = RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                      {"producerGroup": group})
        body = _json_body(await admin.request(addr, cmd),
                          "GET_PRODUCER_CONNECTION_LIST answer", addr)
        return list(body.get("connectionSet", []))

    for clients in request_deadline.answers(await asyncio.gather(
            *(one(a) for a in await _topic_masters(admin, topic)), return_exceptions=True)):
        for client in clients:
            merged.setdefault(client["clientId"], client)
    return Connections([merged[k] for k in sorted(merged)])


async def group_summary(admin: AdminClient, group: str) -> GroupSummary:
    """Who of ``group`` is online (with the first client's version) and its lag."""
    try:
        conns: Connections | None = await consumer_connection(admin, group)
    except TideMQError:
        conns = None
    progress = await consume_progress(admin, group)
    clients = conns.clients if conns is not None else []
    return GroupSummary(group, len(clients), str(clients[0]["version"]) if clients else "",
                        conns.consume_type if conns else "",
                        conns.message_model if conns else "",
                        progress.consume_tps, progress.diff_total)


async def broker_consume_stats(admin: AdminClient, addr: str, *, ordered_only: bool = False,
                               timeout: float | None = None) -> list[ConsumeProgress]:
    """Every group's progress on the broker at ``addr`` (``ordered_only``: on the topics
    that broker holds as ordered only, as mqadmin's ``-o true``); each request waits
    ``timeout`` seconds at most."""
    ordered: set[str] = set()
    if ordered_only:
        response = await _ask(admin, addr, RemotingCommand.request(
            RequestCode.GET_ALL_TOPIC_CONFIG), timeout)
        table = decode_body(response.full_body(), TopicConfigSerializeWrapper)
        ordered = {name for name, tc in table.topic_config_table.items() if tc.order}
    out = []
    for group in await group_configs(admin, addr, timeout=timeout):
        rows, tps = await _stats_of(admin, addr, group, None, timeout=timeout)
        if ordered_only:
            rows = [r for r in rows if r.topic in ordered]
        if rows:
            out.append(ConsumeProgress(group, rows, tps))
    return out


async def reset_offset(admin: AdminClient, group: str, topic: str, timestamp: int, *,
                       force: bool = True, broker_addr: str | None = None,
                       cluster: str | None = None, queue_id: int = -1,
                       offset: int | None = None) -> list[ResetRow]:
    """Move ``group``'s offsets of ``topic`` to the first message stored at or after
    ``timestamp`` (epoch ms; -1: the end), or to ``offset`` of ``queue_id``; on
    ``broker_addr``, or every master of the topic (of ``cluster`` only, when given).
    Unless ``force``, only moves back."""
    addrs = [broker_addr] if broker_addr else await _topic_masters(admin, topic)
    if cluster and not broker_addr:
        in_cluster = set((await admin.masters(cluster)).values())
        addrs = [a for a in addrs if a in in_cluster]
    if not addrs:
        raise NoRouteError(topic, "no master broker")
    header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp,
                                      is_force=force, queue_id=queue_id, offset=offset)
    rows: list[ResetRow] = []
    for addr in addrs:
        response = await admin.request(addr, RemotingCommand.request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header.to_ext()))
        body = _json_body(response, "INVOKE_BROKER_TO_RESET_OFFSET answer", addr)
        rows.extend(ResetRow(r["brokerName"], int(r["queueId"]), int(r["offset"]))
                    for r in body.get("offsetTable", []))
    rows.sort(key=lambda r: (r.broker_name, r.queue_id))
    return rows


async def clone_group_offset(admin: AdminClient, src: str, dest: str, topic: str, *,
                             offline: bool = False) -> list[ResetRow]:
    """Give ``dest`` the offsets ``src`` committed on each queue of ``topic``; queues
    where ``src`` has none are left alone. Returns what was written.

    Unless ``offline`` (mqadmin's ``-o true``, upstream's ``isOffline``: the group or the
    topic is offline), a ``src`` that is online and subscribes to other topics only is
    refused with INVALID_PARAMETER: its offsets of ``topic`` are left from before, which
    upstream's broker skips without a word."""
    if not offline:
        try:
            online = await consumer_connection(admin, src)
        except BrokerResponseError as exc:
            if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                raise
        else:
            if online.subscriptions and topic not in online.subscriptions:
                raise error_for_code(
                    ResponseCode.INVALID_PARAMETER,
                    f"consumer group {src} is online and does not subscribe to {topic} "
                    f"(it subscribes to {', '.join(sorted(online.subscriptions))}); its "
                    "offsets of the topic are old: give -o true to clone them anyway")
    route = await admin.instance.routes.get(topic, refresh=True)
    rows: list[ResetRow] = []
    for queue in sorted(route.subscribe_queues, key=_queue_key):
        addr = await admin.instance.master_address(queue)
        got = await admin.instance.request(addr, ofs.query_offset_request(src, queue))
        committed = ofs.read_committed(got, address=addr)
        if committed is None:
            continue
        await admin.request(addr, ofs.update_offset_request(dest, queue, committed))
        rows.append(ResetRow(queue.broker_name, queue.queue_id, committed))
    return rows


def _queue_key(queue: MessageQueue) -> tuple[str, int]:
    return queue.broker_name, queue.queue_id


async def update_group(admin: AdminClient, config: Mapping[str, Any], addrs: list[str]
                       ) -> None:
    """Create or replace a subscription group (``config``: SubscriptionGroupConfig's
    members) on each of ``addrs``."""
    body = json.dumps(dict(config), sort_keys=True).encode()
    for addr in addrs:
        await admin.request(addr, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))


async def delete_group(admin: AdminClient, group: str, addrs: list[str], *,
                       clean_offset: bool) -> None:
    """Delete subscription group ``group`` (and, with ``clean_offset``, its offsets) on
    each of ``addrs``."""
    ext = DeleteSubscriptionGroupRequestHeader(group_name=group,
                                               clean_offset=clean_offset).to_ext()
    for addr in addrs:
        await admin.request(addr, RemotingCommand.request(
            RequestCode.DELETE_SUBSCRIPTIONGROUP, dict(ext)))


async def running_info(admin: AdminClient, group: str, client_id: str, *,
                       broker_addr: str | None = None, jstack: bool = False
                       ) -> dict[str, Any]:
    """What consumer ``client_id`` of ``group`` reports about itself
    (:mod:`tidemq.client.running_info`; ``jstack``: with its threads' and tasks'
    stacks), asked through ``broker_addr`` or the first master it is connected to."""
    addrs = [broker_addr] if broker_addr else sorted((await admin.masters()).values())
    last: TideMQError | None = None
    for addr in addrs:
        cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": group, "clientId": client_id,
            "jstackEnable": "true" if jstack else "false"})
        response = await admin.instance.request(addr, cmd)
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            last = error_for_code(response.code, response.remark or "", address=addr)
            continue
        ofs.check_success(response, address=addr)
        body = _json_body(response, "GET_CONSUMER_RUNNING_INFO answer", addr)
        return body if isinstance(body, dict) else {}
    raise last or error_for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                                 f"the consumer {client_id} of {group} is not online")


#: How long an admin waits for a message consumed directly: the broker gives the consumer
#: 5 s (:mod:`tidemq.broker.consumer_call`), and the answer has to come back.
CONSUME_DIRECTLY_TIMEOUT = 10.0


async def consume_message_directly(admin: AdminClient, group: str, client_id: str,
                                   topic: str | None, msg_id: str
                                   ) -> ConsumeMessageDirectlyResult:
    """Have consumer ``client_id`` of ``group`` consume the message ``msg_id`` again,
    whatever its offsets say; what the consumer's listener answered
    (:mod:`tidemq.client.direct_consume`). ``msg_id`` is an offset id, or a UNIQ_KEY of
    ``topic``."""
    msg = await admin.view_message(msg_id, topic)
    offset_id = encode_offset_msg_id(pack_host(msg.store_host), msg.commit_log_offset)
    header = ConsumeMessageDirectlyResultRequestHeader(
        consumer_group=group, client_id=client_id, msg_id=offset_id, topic=topic or msg.topic)
    cmd = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, header.to_ext())
    addr = msg.store_host
    response = await admin.instance.request(addr, cmd, CONSUME_DIRECTLY_TIMEOUT)
    ofs.check_success(response, address=addr)
    return decode_body(response.full_body(), ConsumeMessageDirectlyResult)

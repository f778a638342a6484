"""AdminClient: topics, clusters, offsets and message lookups, as mqadmin does them.

Answers are plain values a CLI prints as a table or as JSON: the frozen dataclasses
below (``dataclasses.asdict``), dicts, lists, the codec's body types
(``msgspec.to_builtins``) and :class:`~tidemq.types.MessageExt`.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:meth:`create_topic`             106 GET_BROKER_CLUSTER_INFO, then 17 UPDATE_AND_CREATE_TOPIC
                                 on every master of the cluster (or one broker)
:meth:`delete_topic`             215 on every master, 216 on every name server
:meth:`topic_list`               206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER
:meth:`topic_route`              105 GET_ROUTEINFO_BY_TOPIC
:meth:`topic_status`             31 min / 30 max offset per queue, 32 earliest store time,
                                 the last message's store time by a one-message pull
:meth:`cluster_list`             106
:meth:`broker_status`            28 GET_BROKER_RUNTIME_INFO (body: KVTable)
:meth:`delete_lmq`               20200 DELETE_LMQ (ext ``lmq``) on one broker
:meth:`view_message`             33 VIEW_MESSAGE_BY_ID at the address an offset id decodes
                                 to; else 12 QUERY_MESSAGE by UNIQ_KEY
:meth:`query_messages_by_key`    12 on every master of the topic, merged, keys verified
:meth:`message_at`               11 PULL_MESSAGE of one message at an offset
:meth:`consumer_offsets`         14 QUERY_CONSUMER_OFFSET and 30 per queue
:meth:`update_kv_config`         100 PUT_KV_CONFIG on every name server
:meth:`delete_kv_config`         102 DELETE_KV_CONFIG on every name server
:meth:`get_kv_config`            101 GET_KV_CONFIG (``None`` when not set)
:meth:`kv_list`                  219 GET_KVLIST_BY_NAMESPACE (empty when not set)
===============================  ==========================================================

The ACL 2.0 users and policies are administered by :mod:`tidemq.client.auth_admin`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import TypeVar

from tidemq.client import offsets as ofs
from tidemq.client.config import ClientConfig
from tidemq.client.errors import (
    MessageNotFoundError,
    NoRouteError,
    UnknownClusterError,
)
from tidemq.client.instance import ClientInstance
from tidemq.client.role import InstanceRole
from tidemq.client.stamps import now_ms
from tidemq.client.subscription import Subscription
from tidemq.client.topic_route import PERM_READ, PERM_WRITE, route_request
from tidemq.codec.bodies import ClusterInfo, KVTable, TopicList, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    CreateTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetKVListByNamespaceRequestHeader,
    KVConfigRequestHeader,
    PutKVConfigRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
    format_attributes,
)
from tidemq.codec.message import decode_messages
from tidemq.errors import BrokerResponseError, CorruptRecord, ResponseCode, TideMQError
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.record import HostAddr
from tidemq.types import MessageExt, MessageQueue, PullStatus

__all__ = ["TOOLS_CONSUMER_GROUP", "AdminClient", "BrokerInfo", "ConsumerOffset", "QueueStatus"]

log = logging.getLogger(__name__)

#: The consumer group admin pulls use (as Java's tools do).
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One broker of :meth:`AdminClient.cluster_list` (``broker_id`` 0 is the master)."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue of :meth:`AdminClient.topic_status`; times are epoch ms, 0 when empty."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    earliest_store_time: int
    last_update_time: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerOffset:
    """One queue of :meth:`AdminClient.consumer_offsets`; ``consumer_offset`` is -1 when
    the group has none stored."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return self.broker_offset - max(self.consumer_offset, 0)


def _host_text(host: HostAddr) -> str:
    text = str(host)
    if len(host.ip) == 16:
        ip, _, port = text.rpartition(":")
        return f"[{ip}]:{port}"
    return text


async def _all(calls: Sequence[Awaitable[_T]]) -> list[_T]:
    """Await every call; after all finished, raise the first failure if any."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


class AdminClient(InstanceRole):
    """Administration over the name servers and brokers; see the module docstring."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        config: ClientConfig | None = None,
        instance: ClientInstance | None = None,
    ) -> None:
        super().__init__(namesrv, config, instance)

    def __repr__(self) -> str:
        return f"<AdminClient namesrv={','.join(self.config.namesrv_addr)!r}>"

    # ------------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        if self._instance is not None:
            await self._withdraw(self._instance)


    async def _namesrv(self, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
        response, addr = await self.instance.routes.request_any(
            lambda: RemotingCommand.request(code, dict(ext or {})))
        ofs.check_success(response, address=addr)
        return response

    async def _broker(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        response = await self.instance.request(addr, cmd)
        ofs.check_success(response, address=addr)
        return response

    async def request(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """``cmd`` to the server at ``addr``; its answer, or the error a failure code
        stands for."""
        return await self._broker(addr, cmd)

    # ------------------------------------------------------------------ clusters

    async def cluster_info(self) -> ClusterInfo:
        response = await self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        return decode_body(response.full_body(), ClusterInfo)

    async def cluster_list(self, cluster: str | None = None) -> list[BrokerInfo]:
        """Every broker of ``cluster`` (default: of every cluster), sorted by cluster,
        name and id."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise UnknownClusterError(cluster, sorted(info.cluster_addr_table))
        rows: list[BrokerInfo] = []
        for cluster_name, names in sorted(info.cluster_addr_table.items()):
            if cluster is not None and cluster_name != cluster:
                continue
            for name in sorted(names):
                broker = info.broker_addr_table.get(name)
                if broker is None:
                    continue
                rows.extend(BrokerInfo(cluster_name, name, bid, addr)
                            for bid, addr in sorted(broker.broker_addrs.items()))
        return rows

    async def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Broker name -> master address, for ``cluster`` (default: every cluster)."""
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise UnknownClusterError(cluster, sorted(info.cluster_addr_table))
        names = (info.cluster_addr_table[cluster] if cluster is not None
                 else list(info.broker_addr_table))
        out: dict[str, str] = {}
        for name in sorted(names):
            broker = info.broker_addr_table.get(name)
            addr = broker.master_addr() if broker is not None else None
            if addr is not None:
                out[name] = addr
        return out

    async def broker_status(self, address: str) -> dict[str, str]:
        """The broker's runtime figures (GET_BROKER_RUNTIME_INFO), sorted by name."""
        cmd = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        response = await self._broker(address, cmd)
        return dict(sorted(decode_body(response.full_body(), KVTable).table.items()))

    async def delete_lmq(self, address: str, name: str) -> None:
        """Delete light message queue ``name`` on broker ``address`` (DELETE_LMQ, 20200):
        its entries and every group's offset go; QUERY_NOT_FOUND if it has no entries."""
        cmd = RemotingCommand.request(RequestCode.DELETE_LMQ, {"lmq": name})
        await self._broker(address, cmd)

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self,
        topic: str,
        *,
        cluster: str | None = None,
        broker_addr: str | None = None,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        attributes: Mapping[str, str | None] | None = None,
        topic_filter_type: str = "SINGLE_TAG",
    ) -> list[str]:
        """Create or update ``topic`` on ``broker_addr``, or on every master of ``cluster``
        (default: of every cluster); returns the addresses updated."""
        targets = [broker_addr] if broker_addr else sorted(
            (await self.masters(cluster)).values())
        if not targets:
            raise NoRouteError(topic, f"no master broker in cluster {cluster!r}")
        header = CreateTopicRequestHeader(
            topic=topic, default_topic=self.config.default_topic,
            read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm,
            topic_filter_type=topic_filter_type, topic_sys_flag=0, order=order,
            attributes=format_attributes(attributes) if attributes else None,
        )
        await _all([self._broker(a, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())) for a in targets])
        return targets

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from every master of ``cluster`` (default: all) and from every
        name server; returns the broker addresses."""
        targets = sorted((await self.masters(cluster)).values())
        ext = DeleteTopicRequestHeader(topic=topic).to_ext()
        await _all([self._broker(a, RemotingCommand.request(
            RequestCode.DELETE_TOPIC_IN_BROKER, ext)) for a in targets])
        ns_ext = DeleteTopicFromNamesrvRequestHeader(topic=topic, cluster_name=cluster).to_ext()
        await _all([self._broker(a, RemotingCommand.request(
            RequestCode.DELETE_TOPIC_IN_NAMESRV, ns_ext)) for a in self.config.namesrv_addr])
        self.instance.routes.forget(topic)
        return targets

    # ------------------------------------------------------------------ KV config

    async def _every_namesrv(self, cmd: RemotingCommand) -> list[str]:
        addrs = list(self.config.namesrv_addr)
        await _all([self._broker(a, RemotingCommand.request(cmd.code, dict(cmd.ext_fields)))
                    for a in addrs])
        return addrs

    async def update_kv_config(self, namespace: str, key: str, value: str) -> list[str]:
        """Set ``key`` of ``namespace`` on every name server; returns their addresses."""
        ext = PutKVConfigRequestHeader(namespace=namespace, key=key, value=value).to_ext()
        return await self._every_namesrv(RemotingCommand.request(RequestCode.PUT_KV_CONFIG,
                                                                 ext))

    async def delete_kv_config(self, namespace: str, key: str) -> list[str]:
        """Remove ``key`` of ``namespace`` from every name server."""
        ext = KVConfigRequestHeader(namespace=namespace, key=key).to_ext()
        return await self._every_namesrv(RemotingCommand.request(
            RequestCode.DELETE_KV_CONFIG, ext))

    async def get_kv_config(self, namespace: str, key: str) -> str | None:
        ext = KVConfigRequestHeader(namespace=namespace, key=key).to_ext()
        response, addr = await self.instance.routes.request_any(
            lambda: RemotingCommand.request(RequestCode.GET_KV_CONFIG, dict(ext)))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        ofs.check_success(response, address=addr)
        return response.ext_fields.get("value")

    async def kv_list(self, namespace: str) -> dict[str, str]:
        ext = GetKVListByNamespaceRequestHeader(namespace=namespace).to_ext()
        response, addr = await self.instance.routes.request_any(
            lambda: RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, dict(ext)))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return {}
        ofs.check_success(response, address=addr)
        return dict(sorted(decode_body(response.full_body(), KVTable).table.items()))

    async def topic_list(self) -> list[str]:
        response = await self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        return sorted(decode_body(response.full_body(), TopicList).topic_list)

    async def topic_route(self, topic: str) -> TopicRouteData:
        response, addr = await self.instance.routes.request_any(lambda: route_request(topic))
        ofs.check_success(response, address=addr)
        return decode_body(response.full_body(), TopicRouteData)

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Offsets and times of every readable queue of ``topic``."""
        route = await self.instance.routes.get(topic, refresh=True)
        return await _all([self._queue_status(mq) for mq in route.subscribe_queues])

    async def _queue_status(self, queue: MessageQueue) -> QueueStatus:
        addr = await self.instance.master_address(queue)
        lo, hi = await _all([
            self._broker(addr, ofs.min_offset_request(queue)),
            self._broker(addr, ofs.max_offset_request(queue)),
        ])
        min_offset = ofs.read_offset(lo, address=addr)
        max_offset = ofs.read_offset(hi, address=addr)
        earliest = last = 0
        if max_offset > min_offset:
            earliest_resp = await self._broker(addr, ofs.earliest_time_request(queue))
            earliest = max(ofs.read_timestamp(earliest_resp, address=addr), 0)
            try:
                last = (await self.message_at(queue, max_offset - 1)).store_timestamp
            except MessageNotFoundError:
                last = 0
        return QueueStatus(queue, min_offset, max_offset, earliest, last)

    # ------------------------------------------------------------------ offsets

    async def consumer_offsets(self, group: str, topic: str) -> list[ConsumerOffset]:
        """Per readable queue of ``topic``: the broker's max offset and ``group``'s."""
        route = await self.instance.routes.get(topic, refresh=True)

        async def one(queue: MessageQueue) -> ConsumerOffset:
            addr = await self.instance.master_address(queue)
            hi = await self._broker(addr, ofs.max_offset_request(queue))
            mine = await self.instance.request(addr, ofs.query_offset_request(group, queue))
            committed = ofs.read_committed(mine, address=addr)
            return ConsumerOffset(queue, ofs.read_offset(hi, address=addr),
                                  -1 if committed is None else committed)

        return await _all([one(mq) for mq in route.subscribe_queues])

    # ------------------------------------------------------------------ messages

    async def message_at(self, queue: MessageQueue, offset: int) -> MessageExt:
        """The message at ``offset`` of ``queue`` (a one-message pull)."""
        # here: the pull reader loads numpy's columns, which no other admin call needs
        from tidemq.client.pull import pull_request, read_pull_response

        addr = await self.instance.master_address(queue)
        sub = Subscription.parse(queue.topic)
        cmd = pull_request(TOOLS_CONSUMER_GROUP, queue, offset, max_nums=1, subscription=sub)
        result = read_pull_response(await self.instance.request(addr, cmd), queue, sub,
                                    address=addr, offset=offset)
        if result.status is not PullStatus.FOUND or not result.messages:
            where = f"{queue.topic} {queue.broker_name}:{queue.queue_id} @ {offset}"
            raise MessageNotFoundError(where, f"{result.status.value}: " + (
                f"the queue holds offsets {result.min_offset} to {result.max_offset - 1}"
                if result.max_offset > result.min_offset else
                f"the queue holds no message (its next offset is {result.max_offset})"))
        return result.messages[0]

    async def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """The message with ``msg_id``: an offset id is looked up at the broker it names
        (VIEW_MESSAGE_BY_ID); otherwise, or if that fails and ``topic`` is given, the id
        is taken as a UNIQ_KEY and queried on the topic's brokers."""
        try:
            host, phys = decode_offset_msg_id(msg_id)
            # A UNIQ_KEY has an IPv4 offset id's length; its bytes give no TCP port.
            addr: str | None = _host_text(host) if 0 < host.port <= 0xFFFF else None
        except (CorruptRecord, ValueError):
            addr, phys = None, -1
        if addr is not None and (topic is None or addr in await self._addresses(topic)):
            try:
                return await self._view(addr, phys, topic)
            except TideMQError as exc:
                if topic is None:
                    raise
                log.info("view of %s at %s failed, trying it as a UNIQ_KEY: %s",
                         msg_id, addr, exc)
        if topic is None:
            raise MessageNotFoundError(
                msg_id, "not an offset message id; give its topic to look it up as a message id "
                        "(UNIQ_KEY)")
        found = await self.query_messages_by_key(topic, msg_id, unique=True)
        if not found:
            raise MessageNotFoundError(msg_id)
        return found[0]

    async def _addresses(self, topic: str) -> set[str]:
        """The brokers of ``topic``'s route; those of the whole cluster while the name
        servers route it not yet (a DLQ or retry topic a broker created a moment ago)."""
        try:
            route = await self.instance.routes.get(topic)
        except BrokerResponseError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            info = await self.cluster_info()
            return {a for b in info.broker_addr_table.values() for a in b.broker_addrs.values()}
        return {a for b in route.brokers.values() for a in b.broker_addrs.values()}

    async def _view(self, addr: str, phys: int, topic: str | None) -> MessageExt:
        header = ViewMessageRequestHeader(offset=phys, topic=topic)
        cmd = RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, header.to_ext())
        messages = decode_messages((await self._broker(addr, cmd)).full_body())
        if not messages:
            raise MessageNotFoundError(f"{addr}@{phys}", "empty answer")
        return messages[0]

    async def query_messages_by_key(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 64,
        begin_ms: int = 0,
        end_ms: int | None = None,
        unique: bool = False,
        cluster: str | None = None,
    ) -> list[MessageExt]:
        """Messages of ``topic`` stored in ``[begin_ms, end_ms]`` with ``key`` among their
        KEYS (``unique``: as their UNIQ_KEY), from every master (of ``cluster``'s brokers
        only, when given), oldest first."""
        route = await self.instance.routes.get(topic, refresh=True)
        masters = route.master_addresses
        if cluster is not None:
            clusters = {b.cluster for b in route.brokers.values()}
            masters = {n: a for n, a in masters.items() if route.brokers[n].cluster == cluster}
            if cluster not in clusters:
                raise ValueError(f"topic {topic} has no broker in cluster {cluster} (its "
                                 f"clusters: {', '.join(sorted(clusters)) or 'none'})")
        header = QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
            end_timestamp=now_ms() if end_ms is None else end_ms,
            unique_key_query=True if unique else None,
        )

        async def one(addr: str) -> list[MessageExt]:
            cmd = RemotingCommand.request(RequestCode.QUERY_MESSAGE, header.to_ext())
            response = await self.instance.request(addr, cmd)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                return []
            ofs.check_success(response, address=addr)
            return decode_messages(response.full_body())

        batches = await _all([one(a) for a in sorted(set(masters.values()))])
        seen: set[tuple[str, int, int]] = set()
        out: list[MessageExt] = []
        for msg in (m for batch in batches for m in batch):
            ident = (msg.store_host, msg.commit_log_offset, msg.queue_offset)
            matches = msg.uniq_key == key if unique else key in msg.keys
            if matches and ident not in seen and msg.topic == topic:
                seen.add(ident)
                out.append(msg)
        out.sort(key=lambda m: (m.store_timestamp, m.commit_log_offset))
        return out

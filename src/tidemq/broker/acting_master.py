"""``slaveActingMaster`` (RocketMQ 5): a replica standing in for its group's master.

While the name servers list no master for the group, the replica with the smallest
``brokerId`` listed acts for it where a replica's own log cannot -- upstream's escape
bridge:

* a message a consumer hands back (CONSUMER_SEND_MSG_BACK) is sent on to the master of
  another broker group of the cluster, as a send to ``%RETRY%<group>`` that carries the
  delay level, the reconsume count and the count allowed (so that master parks it, or
  stores it in ``%DLQ%<group>``, by its own retry rules);
* a parked delayed or timer message that falls due is sent to its real topic on the
  master of another group that serves the topic (the delay service's thread waits for
  the send, :meth:`ActingMaster.escape_due`);
* a half (prepared) transactional message due for a check-back is sent, prepared, to
  its real topic on the master of another group that serves the topic, which then
  checks it with the producer (:mod:`tidemq.broker.transaction_escape`).

Whether it acts, and which masters there are, is read from the name servers
(GET_BROKER_CLUSTER_INFO, GET_ROUTEINFO_BY_TOPIC) for each message; the delay service
reads :attr:`ActingMaster.now_acting`, which :meth:`ActingMaster.watch` refreshes every
second. A replica takes no send itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random

from tidemq.broker.cluster_info import ask_cluster
from tidemq.broker.context import BrokerContext
from tidemq.codec.bodies import ClusterInfo, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetRouteInfoRequestHeader, SendMessageRequestHeader
from tidemq.errors import ResponseCode, TideMQError, error_for_code
from tidemq.formats.record import Record

__all__ = ["ActingMaster", "Escape", "acting_for", "other_masters"]

log = logging.getLogger(__name__)

#: The producer group named on escaped sends (upstream's inner producer group).
ESCAPE_GROUP = "__BROKER_ESCAPE_PRODUCER_GROUP"
#: Seconds between two checks of whether the replica acts (for the delay service).
WATCH_INTERVAL = 1.0
#: Seconds the delay service waits for one escaped delivery.
ESCAPE_TIMEOUT = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Escape:
    """A message to store on another group's master."""

    topic: str
    body: bytes
    properties: str
    flag: int
    sys_flag: int
    born_timestamp: int
    reconsume_times: int
    max_reconsume_times: int | None = None
    queue_id: int = 0
    producer_group: str = ESCAPE_GROUP


def acting_for(info: ClusterInfo, broker_name: str, broker_id: int) -> bool:
    """Whether replica ``broker_id`` of ``broker_name`` acts for its master: no master is
    listed for the group, and no replica with a smaller id."""
    group = info.broker_addr_table.get(broker_name)
    if group is None:
        return False
    ids = set(group.broker_addrs)
    return 0 not in ids and broker_id <= min(ids, default=broker_id)


def other_masters(info: ClusterInfo, cluster: str, broker_name: str) -> list[str]:
    """The master addresses of the other broker groups of ``cluster``."""
    out = []
    for name in sorted(info.cluster_addr_table.get(cluster, [])):
        group = info.broker_addr_table.get(name)
        addr = group.master_addr() if group is not None else None
        if name != broker_name and addr:
            out.append(addr)
    return out


class ActingMaster:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.enabled = ctx.config.slave_acting_master
        self.escaped = 0
        #: Whether it acted at the last check (read by the delay service's thread).
        self.now_acting = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def cluster(self) -> ClusterInfo:
        info = await ask_cluster(self.ctx, "is the master down?")
        if info is not None:
            return info
        raise error_for_code(ResponseCode.SYSTEM_ERROR,
                             "no name server answered: cannot tell whether this replica "
                             "acts for its master")

    async def acting(self) -> ClusterInfo | None:
        """The cluster as the name servers list it when this replica acts for its master
        now (``slaveActingMaster`` on), else ``None``."""
        if not self.enabled or not self.ctx.store.replica:
            return None
        cfg = self.ctx.config
        info = await self.cluster()
        if not acting_for(info, cfg.broker_name, self.ctx.replication.role.state.broker_id):
            return None
        return info

    async def escape(self, info: ClusterInfo, msg: Escape) -> str:
        """Store ``msg`` on another master of the cluster ``info`` lists; the address
        that took it."""
        cfg = self.ctx.config
        masters = other_masters(info, cfg.broker_cluster_name, cfg.broker_name)
        random.shuffle(masters)
        return await self.hand_to([(addr, msg.queue_id) for addr in masters], msg)

    async def hand_to(self, targets: list[tuple[str, int]], msg: Escape) -> str:
        """``msg`` to the first of ``targets`` (address, queue id) that stores it; the
        address that took it. Raises (SYSTEM_ERROR, saying why) when none did."""
        why = "no other broker group of the cluster has a master"
        for addr, queue_id in targets:
            header = SendMessageRequestHeader(
                producer_group=msg.producer_group, topic=msg.topic, default_topic="TBW102",
                default_topic_queue_nums=self.ctx.config.default_topic_queue_nums,
                queue_id=queue_id, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp,
                flag=msg.flag, properties=msg.properties, reconsume_times=msg.reconsume_times,
                max_reconsume_times=msg.max_reconsume_times)
            cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, header.to_ext(), msg.body)
            try:
                resp = await self.ctx.client.request(addr, cmd, 3.0)
            except TideMQError as exc:
                why = f"{addr}: {exc}"
                continue
            if resp.code == ResponseCode.SUCCESS:
                self.escaped += 1
                return addr
            why = f"{addr} answered {resp.code} {resp.remark}"
        raise error_for_code(ResponseCode.SYSTEM_ERROR,
                             f"this replica acts for its master but could not hand the "
                             f"message to another master ({why})")

    # ------------------------------------------------------------------ delayed messages

    async def watch(self) -> None:
        """Keep :attr:`now_acting` current, every :data:`WATCH_INTERVAL` seconds."""
        self._loop = asyncio.get_running_loop()
        while True:
            try:
                self.now_acting = await self.acting() is not None
            except TideMQError as exc:
                log.info("cannot tell whether this replica acts for its master: %s", exc)
                self.now_acting = False
            await asyncio.sleep(WATCH_INTERVAL)

    def escape_due(self, topic: str, queue_id: int, rec: Record, properties: str) -> None:
        """From the delay service's thread: deliver a due parked message to ``topic`` on
        another group's master; raises when none took it (the service tries again)."""
        loop = self._loop
        if loop is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR, "the acting-master watch is not "
                                 "running")
        msg = Escape(topic, bytes(rec.body), properties, rec.flag, rec.sys_flag,
                     rec.born_timestamp, rec.reconsume_times, queue_id=queue_id)
        asyncio.run_coroutine_threadsafe(self._escape_due(msg), loop).result(ESCAPE_TIMEOUT)

    async def _escape_due(self, msg: Escape) -> str:
        info = await self.acting()
        if info is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 "this replica no longer acts for its master")
        return await self.escape_to_topic(msg)

    async def escape_to_topic(self, msg: Escape) -> str:
        """Store ``msg`` in its topic on the master of another group that serves the
        topic; the address that took it."""
        return await self.hand_to(await self.topic_masters(msg.topic, msg.queue_id), msg)

    async def topic_masters(self, topic: str, queue_id: int) -> list[tuple[str, int]]:
        """(master address, queue id) of the other groups that take writes of ``topic``:
        the queue id is the message's own, wrapped to each one's write queues. Empty when
        there is none, or no name server answered."""
        header = GetRouteInfoRequestHeader(topic=topic)
        for namesrv in self.ctx.config.namesrv_addrs:
            try:
                resp = await self.ctx.client.request(namesrv, RemotingCommand.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext()), 3.0)
            except TideMQError as exc:
                log.info("asking %s for the route of %s failed: %s", namesrv, topic, exc)
                continue
            if resp.code != ResponseCode.SUCCESS:
                return []
            route = decode_body(resp.full_body(), TopicRouteData)
            masters = {d.broker_name: d.master_addr() for d in route.broker_datas}
            out = [(addr, queue_id % q.write_queue_nums) for q in route.queue_datas
                   if q.broker_name != self.ctx.config.broker_name and q.write_queue_nums > 0
                   and q.perm & 2 and (addr := masters.get(q.broker_name))]
            random.shuffle(out)
            return out
        return []

"""``slaveActingMaster`` (RocketMQ 5): a replica standing in for its group's master.

While the name servers list no master for the group, the replica with the smallest
``brokerId`` listed acts for it where a replica's own log cannot: a message a consumer
hands back (CONSUMER_SEND_MSG_BACK) is sent on to the master of another broker group of
the cluster, as a send to ``%RETRY%<group>`` that carries the delay level, the reconsume
count and the count allowed (so that master parks it, or stores it in ``%DLQ%<group>``,
by its own retry rules) -- upstream's escape bridge. Whether it acts, and which masters
there are, is read from the name servers (GET_BROKER_CLUSTER_INFO) for each message: a
send-back reaches a replica only while its consumer finds no master.

Not done here: due delayed and timer messages parked on the replica are not escaped
(their master, or a newly elected one, delivers them), and a replica takes no send.
"""

from __future__ import annotations

import dataclasses
import logging
import random

from tidemq.broker.context import BrokerContext
from tidemq.codec.bodies import ClusterInfo, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import SendMessageRequestHeader
from tidemq.errors import ResponseCode, TideMQError, error_for_code

__all__ = ["ActingMaster", "Escape", "acting_for", "other_masters"]

log = logging.getLogger(__name__)

#: The producer group named on escaped sends (upstream's inner producer group).
ESCAPE_GROUP = "__BROKER_ESCAPE_PRODUCER_GROUP"


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
    max_reconsume_times: int


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

    async def cluster(self) -> ClusterInfo:
        for namesrv in self.ctx.config.namesrv_addrs:
            try:
                resp = await self.ctx.client.request(namesrv, RemotingCommand.request(
                    RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
                info = decode_body(resp.full_body(), ClusterInfo)
            except (TideMQError, ValueError) as exc:
                log.info("asking %s for the cluster failed: %s", namesrv, exc)
                continue
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
        header = SendMessageRequestHeader(
            producer_group=ESCAPE_GROUP, topic=msg.topic, default_topic="TBW102",
            default_topic_queue_nums=cfg.default_topic_queue_nums, queue_id=0,
            sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, flag=msg.flag,
            properties=msg.properties, reconsume_times=msg.reconsume_times,
            max_reconsume_times=msg.max_reconsume_times)
        why = "no other broker group of the cluster has a master"
        for addr in masters:
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

"""A topic's route as the name servers give it, and the queues clients derive from it.

A :class:`TopicRoute` is one ``TopicRouteData`` (remoting.md §2.3) plus what clients read
off it, computed once when it arrives:

* publish queues -- for each *writable* QueueData whose broker has a master (id 0),
  queues ``0..writeQueueNums-1``, QueueDatas in broker-name order; with
  ``orderTopicConf`` (``brokerName:count;...``) exactly those queues instead;
* subscribe queues -- for each *readable* QueueData, queues ``0..readQueueNums-1``;
* broker name -> master address.

Auto-creation: when the name server answers TOPIC_NOT_EXIST a producer takes the route
of the template topic ``TBW102`` with each QueueData clamped to
``min(default_topic_queue_nums, readQueueNums)`` queues (:meth:`TopicRoute.build` with
``from_default=True``) and sends with ``defaultTopic=TBW102``; the broker creates the
topic on the first send.

The request and its answer are plain functions here; what a cache does with them is
:mod:`tidemq.client.route_table` (no I/O), and who waits for them is
:mod:`tidemq.client.routes` (asyncio) or :mod:`tidemq.client.blocking` (threads).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

import msgspec

from tidemq.codec.bodies import BrokerData, QueueData, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetRouteInfoRequestHeader
from tidemq.errors import ResponseCode, error_for_code
from tidemq.types import MessageQueue

__all__ = [
    "MASTER_ID",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "TopicRoute",
    "is_readable",
    "is_writable",
    "name_server_order",
    "read_member",
    "read_route_response",
    "route_request",
    "with_absent_brokers",
]

log = logging.getLogger(__name__)

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
MASTER_ID = 0


def is_writable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def is_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


# ---------------------------------------------------------------- the route and its queues


def _clamped(qd: QueueData, limit: int) -> QueueData:
    n = min(limit, qd.read_queue_nums)
    return QueueData(broker_name=qd.broker_name, read_queue_nums=n, write_queue_nums=n,
                     perm=qd.perm, topic_sys_flag=qd.topic_sys_flag)


def _order_queues(topic: str, conf: str) -> list[MessageQueue]:
    queues: list[MessageQueue] = []
    for item in conf.split(";"):
        name, sep, count = item.strip().partition(":")
        if sep and name and count.strip().isdigit():
            queues.extend(MessageQueue(topic, name, i) for i in range(int(count)))
    return queues


def _publish_queues(topic: str, data: TopicRouteData,
                    brokers: Mapping[str, BrokerData]) -> list[MessageQueue]:
    if data.order_topic_conf:
        return _order_queues(topic, data.order_topic_conf)
    queues: list[MessageQueue] = []
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        broker = brokers.get(qd.broker_name)
        if not is_writable(qd.perm) or broker is None or broker.master_addr() is None:
            continue
        queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return queues


def _subscribe_queues(topic: str, data: TopicRouteData) -> list[MessageQueue]:
    queues: list[MessageQueue] = []
    for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
        if is_readable(qd.perm):
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return queues


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's route and the queues derived from it (see the module docstring)."""

    topic: str
    data: TopicRouteData
    publish_queues: tuple[MessageQueue, ...]
    subscribe_queues: tuple[MessageQueue, ...]
    brokers: Mapping[str, BrokerData]
    from_default: bool = False

    @classmethod
    def build(cls, topic: str, data: TopicRouteData, *, from_default: bool = False,
              default_queue_nums: int = 4) -> TopicRoute:
        """Derive the queues of ``topic`` from ``data``; with ``from_default``, ``data`` is
        the template topic's route and each QueueData is clamped to
        ``default_queue_nums``."""
        if from_default:
            data = TopicRouteData(
                queue_datas=[_clamped(qd, default_queue_nums) for qd in data.queue_datas],
                broker_datas=list(data.broker_datas),
                filter_server_table=dict(data.filter_server_table),
            )
        brokers = {bd.broker_name: bd for bd in data.broker_datas}
        return cls(topic, data, tuple(_publish_queues(topic, data, brokers)),
                   tuple(_subscribe_queues(topic, data)), brokers, from_default)

    def master_address(self, broker_name: str) -> str | None:
        broker = self.brokers.get(broker_name)
        return broker.master_addr() if broker is not None else None

    def read_address(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """Where to read ``broker_name``'s queues: the member :func:`read_member` picks."""
        broker = self.brokers.get(broker_name)
        if broker is None or not broker.broker_addrs:
            return None
        return broker.broker_addrs[read_member(broker.broker_addrs, broker_id)]

    @property
    def master_addresses(self) -> dict[str, str]:
        """Broker name -> master address, for brokers that have a master."""
        out: dict[str, str] = {}
        for name, broker in self.brokers.items():
            addr = broker.master_addr()
            if addr is not None:
                out[name] = addr
        return out


def read_member(addrs: Mapping[int, str], broker_id: int = MASTER_ID) -> int:
    """Which member of a broker group (``addrs``: brokerId -> address, not empty) to
    read from when ``broker_id`` is wanted (a pull answer's ``suggestWhichBrokerId``):
    that one if listed; for a replica id that is not listed, the next id, as upstream's
    ``findBrokerAddressInSubscribe``; else the master; else, the master being down, the
    replica with the lowest brokerId."""
    if broker_id in addrs:
        return broker_id
    if broker_id != MASTER_ID and broker_id + 1 in addrs:
        return broker_id + 1
    return MASTER_ID if MASTER_ID in addrs else min(addrs)


def with_absent_brokers(data: TopicRouteData, known: TopicRouteData) -> TopicRouteData:
    """``data`` plus the brokers of ``known`` that it lacks (their queue data and
    addresses): the route to use while the answering name server may not have heard from
    every broker yet. Brokers ``data`` has are taken as ``data`` says."""
    present = {bd.broker_name for bd in data.broker_datas}
    absent = [bd for bd in known.broker_datas if bd.broker_name not in present]
    if not absent:
        return data
    names = {bd.broker_name for bd in absent}
    log.info("keeping brokers %s in a route from a name server that has just started",
             sorted(names))
    return msgspec.structs.replace(
        data, broker_datas=[*data.broker_datas, *absent],
        queue_datas=[*data.queue_datas,
                     *(qd for qd in known.queue_datas if qd.broker_name in names)])


# ---------------------------------------------------------------- request and response


def route_request(topic: str) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC asking for standard JSON (remoting.md §1.6)."""
    header = GetRouteInfoRequestHeader(topic=topic, accept_standard_json_only=True)
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, header.to_ext())


def read_route_response(response: RemotingCommand, *, address: str) -> TopicRouteData:
    """The route in ``response``; a non-success code raises its
    :func:`~tidemq.errors.error_for_code` error (TOPIC_NOT_EXIST has ``code`` 17)."""
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=address)
    return decode_body(response.full_body(), TopicRouteData)


def name_server_order(addrs: Sequence[str], start: int) -> list[str]:
    """Every name server once, beginning with ``addrs[start]``."""
    n = len(addrs)
    return [addrs[(start + i) % n] for i in range(n)]


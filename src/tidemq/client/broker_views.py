"""Read-only views of brokers, as mqadmin's ``getConsumerConfig``, ``queryCq``,
``producer`` and ``haStatus`` ask for them.

Every operation takes a started :class:`~tidemq.client.admin.AdminClient`.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`consumer_configs`         106 GET_BROKER_CLUSTER_INFO, then 352
                                 GET_SUBSCRIPTIONGROUP_CONFIG on each broker name's master
:func:`consume_queue`            321 QUERY_CONSUME_QUEUE
:func:`producers`                328 GET_ALL_PRODUCER_INFO
:func:`ha_status`                907 GET_BROKER_HA_STATUS
===============================  ==========================================================
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import QueryConsumeQueueRequestHeader
from tidemq.errors import ResponseCode, error_for_code

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["ConsumerConfig", "consume_queue", "consumer_configs", "ha_status", "producers"]


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """A subscription group's config as one broker holds it."""

    cluster: str
    broker_name: str
    config: dict[str, Any]


def _json(response: RemotingCommand, addr: str, what: str) -> Any:
    try:
        return json.loads(response.full_body())
    except ValueError as exc:
        raise error_for_code(ResponseCode.SYSTEM_ERROR, f"{what} from {addr} is not JSON: "
                             f"{exc}", address=addr) from None


async def consumer_configs(admin: AdminClient, group: str) -> list[ConsumerConfig]:
    """``group``'s config on the master of every broker name that has it (by cluster and
    broker name)."""
    info = await admin.cluster_info()
    cluster_of = {name: cluster for cluster, names in info.cluster_addr_table.items()
                  for name in names}
    out: list[ConsumerConfig] = []
    for name, broker in sorted(info.broker_addr_table.items()):
        addr = broker.master_addr() or min(broker.broker_addrs.items())[1]
        response = await admin.instance.request(addr, RemotingCommand.request(
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group}))
        if response.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
            continue
        if response.code != ResponseCode.SUCCESS:
            raise error_for_code(response.code, response.remark or "", address=addr)
        out.append(ConsumerConfig(cluster_of.get(name, ""), name,
                                  _json(response, addr, "SubscriptionGroupConfig")))
    return out


async def consume_queue(admin: AdminClient, addr: str, topic: str, queue_id: int,
                        index: int, count: int, group: str | None = None) -> dict[str, Any]:
    """Up to ``count`` consume-queue entries of one queue from ``index``, with the queue's
    bounds (QueryConsumeQueueResponseBody)."""
    ext = QueryConsumeQueueRequestHeader(topic=topic, queue_id=queue_id, index=index,
                                         count=count, consumer_group=group or None).to_ext()
    response = await admin.request(addr, RemotingCommand.request(
        RequestCode.QUERY_CONSUME_QUEUE, ext))
    body: dict[str, Any] = _json(response, addr, "QueryConsumeQueueResponseBody")
    return body


async def producers(admin: AdminClient, addr: str) -> dict[str, list[dict[str, Any]]]:
    """The producers connected to the broker at ``addr``, by group (ProducerInfo)."""
    response = await admin.request(addr, RemotingCommand.request(
        RequestCode.GET_ALL_PRODUCER_INFO))
    data: dict[str, list[dict[str, Any]]] = _json(response, addr,
                                                  "ProducerTableInfo").get("data") or {}
    return data


async def ha_status(admin: AdminClient, addr: str) -> dict[str, Any]:
    """The broker's HA runtime (HARuntimeInfo): a master's replicas, a replica's link."""
    response = await admin.request(addr, RemotingCommand.request(
        RequestCode.GET_BROKER_HA_STATUS))
    info: dict[str, Any] = _json(response, addr, "HARuntimeInfo")
    return info

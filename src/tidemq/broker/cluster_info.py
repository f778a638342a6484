"""The cluster as the name servers list it, asked by the broker itself."""

from __future__ import annotations

import logging

from tidemq.broker.context import BrokerContext
from tidemq.codec.bodies import ClusterInfo, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import TideMQError

__all__ = ["ask_cluster"]

log = logging.getLogger(__name__)


async def ask_cluster(ctx: BrokerContext, why: str) -> ClusterInfo | None:
    """GET_BROKER_CLUSTER_INFO of the first name server that answers, ``None`` when none
    does; each failure is logged at INFO with ``why`` it was asked."""
    for namesrv in ctx.config.namesrv_addrs:
        try:
            resp = await ctx.client.request(namesrv, RemotingCommand.request(
                RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
            return decode_body(resp.full_body(), ClusterInfo)
        except (TideMQError, ValueError) as exc:
            log.info("asking %s for the cluster (%s) failed: %s", namesrv, why, exc)
    return None

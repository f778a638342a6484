"""VIEW_BROKER_STATS_DATA (315) and QUERY_TOPIC_CONSUME_BY_WHO (300): the counts behind
``mqadmin statsAll``.

315 takes ext ``statsName`` and ``statsKey``: ``TOPIC_PUT_NUMS`` (key: a topic),
``GROUP_GET_NUMS`` (key: ``topic@group``), ``BROKER_PUT_NUMS`` / ``BROKER_GET_NUMS`` (key
ignored). Its body is upstream's ``BrokerStatsData``: ``statsMinute``, ``statsHour`` and
``statsDay``, each ``{"sum", "tps"}`` over the current minute, the last 60 minutes and the
last 24 hours (whole hours, the current one included); ``statsMinute``'s ``tps`` is the
rate of the last seconds. A name or key the broker has no count for is
answered SYSTEM_ERROR, as upstream. 300 answers ``{"groupList": [...]}``: the groups
online with a subscription to the topic and those with offsets on it.
"""

from __future__ import annotations

import json

from tidemq.broker.context import BrokerContext
from tidemq.broker.stats import RateMeter
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["StatsProcessor"]

_SPANS = (("statsMinute", 60), ("statsHour", 3600), ("statsDay", 86_400))


class StatsProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.VIEW_BROKER_STATS_DATA, self.stats_data)
        reg(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.consumed_by)

    def _meter(self, name: str, key: str) -> RateMeter | None:
        stats = self.ctx.stats
        if name == "TOPIC_PUT_NUMS":
            return stats.topic_put.get(key)
        if name == "GROUP_GET_NUMS":
            return stats.topic_group_get.get(key)
        if name == "BROKER_PUT_NUMS":
            return stats.put_msgs
        if name == "BROKER_GET_NUMS":
            return stats.get_msgs
        return None

    def stats_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = cmd.ext_fields.get("statsName", "")
        key = cmd.ext_fields.get("statsKey", "")
        meter = self._meter(name, key)
        if meter is None:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"The stats <{name}> <{key}> not exist")
        body: dict[str, dict[str, float]] = {}
        for field, seconds in _SPANS:
            total = meter.sum_since(seconds)
            tps = meter.rate() if seconds == 60 else total / seconds
            body[field] = {"sum": total, "tps": tps}
        return cmd.response(body=json.dumps(body, sort_keys=True).encode())

    def consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        if not topic:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, "topic is required")
        groups = set(self.ctx.offsets.groups_of(topic))
        groups.update(g for g, info in self.ctx.consumers.groups.items()
                      if topic in info.subscriptions)
        return cmd.response(body=json.dumps({"groupList": sorted(groups)}).encode())

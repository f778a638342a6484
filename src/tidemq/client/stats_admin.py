"""Per-topic and per-group traffic, as ``mqadmin statsAll`` shows it.

For each topic: 300 QUERY_TOPIC_CONSUME_BY_WHO and 315 VIEW_BROKER_STATS_DATA
(``TOPIC_PUT_NUMS``, ``GROUP_GET_NUMS``) on every master of its route, and 208
GET_CONSUME_STATS for each consuming group's accumulation. A broker that has no count for
a key (nothing was put or got since it started) counts as zero.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from tidemq.client.group_admin import consume_progress
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["TopicGroupStats", "stats_all", "topic_stats"]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


@dataclasses.dataclass(frozen=True, slots=True)
class TopicGroupStats:
    """One line of ``statsAll``; ``group`` is empty for a topic nobody consumes (then the
    out figures are ``None``)."""

    topic: str
    group: str
    accumulation: int
    in_tps: float
    out_tps: float | None
    in_msg_24h: int
    out_msg_24h: int | None


async def _stats(admin: AdminClient, addr: str, name: str, key: str) -> tuple[float, int]:
    cmd = RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA,
                                  {"statsName": name, "statsKey": key})
    response = await admin.instance.request(addr, cmd)
    if response.code != ResponseCode.SUCCESS:
        return 0.0, 0  # no count for the key on this broker
    body: dict[str, Any] = json.loads(bytes(response.full_body()))
    return float(body["statsMinute"]["tps"]), int(body["statsDay"]["sum"])


async def _consumers(admin: AdminClient, addrs: list[str], topic: str) -> list[str]:
    groups: set[str] = set()
    for addr in addrs:
        response = await admin.request(addr, RemotingCommand.request(
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))
        groups.update(json.loads(bytes(response.full_body())).get("groupList", []))
    return sorted(groups)


async def topic_stats(admin: AdminClient, topic: str) -> list[TopicGroupStats]:
    """The lines of one topic: one per consuming group, or one without a group."""
    route = await admin.instance.routes.get(topic, refresh=True)
    addrs = sorted(set(route.master_addresses.values()))
    in_tps, in_day = 0.0, 0
    for addr in addrs:
        tps, day = await _stats(admin, addr, "TOPIC_PUT_NUMS", topic)
        in_tps, in_day = in_tps + tps, in_day + day
    groups = await _consumers(admin, addrs, topic)
    if not groups:
        return [TopicGroupStats(topic, "", 0, in_tps, None, in_day, None)]
    out = []
    for group in groups:
        out_tps, out_day = 0.0, 0
        for addr in addrs:
            tps, day = await _stats(admin, addr, "GROUP_GET_NUMS", f"{topic}@{group}")
            out_tps, out_day = out_tps + tps, out_day + day
        progress = await consume_progress(admin, group, topic=topic)
        out.append(TopicGroupStats(topic, group, max(progress.diff_total, 0), in_tps,
                                   out_tps, in_day, out_day))
    return out


async def stats_all(admin: AdminClient, *, topic: str | None = None,
                    active_only: bool = False) -> list[TopicGroupStats]:
    """Every topic's lines (retry and dead-letter topics left out), or ``topic``'s;
    ``active_only``: only lines with traffic in the last day."""
    topics = [topic] if topic else [t for t in await admin.topic_list()
                                    if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))]
    lines: list[TopicGroupStats] = []
    for name in topics:
        try:
            found = await topic_stats(admin, name)
        except Exception:
            if topic:
                raise
            continue  # a topic without a route (being deleted): skipped, as upstream
        lines.extend(s for s in found
                     if not active_only or s.in_msg_24h > 0 or (s.out_msg_24h or 0) > 0)
    return lines

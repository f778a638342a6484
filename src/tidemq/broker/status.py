"""The broker's status figures: the runtime-info table (GET_BROKER_RUNTIME_INFO, 28), the
version it reports, disk usage and uptime -- shared by the admin processor and metrics."""

from __future__ import annotations

import time
from pathlib import Path

from tidemq._version import __version__
from tidemq.broker.context import BrokerContext
from tidemq.errors import CorruptRecord
from tidemq.formats.record import Record, decode_record
from tidemq.store.message_store import MessageStore
from tidemq.store.retention import disk_usage_ratio as store_disk_usage_ratio

__all__ = ["VERSION", "disk_usage_ratio", "earliest_message_time", "runtime_info",
           "uptime_text"]

#: The version a broker reports (package metadata, one source).
VERSION = __version__


def disk_usage_ratio(path: str) -> float:
    """Used fraction of the partition holding ``path`` (as the store's retention sees it)."""
    try:
        return store_disk_usage_ratio(Path(path))
    except OSError:
        return 0.0


def uptime_text(started: float) -> str:
    secs = int(time.time() - started)
    return f"{secs // 86400} days, {secs % 86400 // 3600} hours, {secs % 3600 // 60} minutes"


def earliest_message_time(store: MessageStore) -> int:
    """The store time (ms) of the oldest message in the commit log; -1 when it holds none
    (as upstream's ``getEarliestMessageTime``)."""
    offset = store.commitlog.min_offset
    if offset >= store.commitlog.max_offset:
        return -1
    view = store.read_record(offset)
    if view is None:
        return -1
    try:
        record = decode_record(view, expected_physical_offset=offset)
    except CorruptRecord:
        return -1
    return record.store_timestamp if isinstance(record, Record) else -1


def runtime_info(ctx: BrokerContext) -> dict[str, str]:
    store = ctx.store
    behind, lag_ms = store.dispatch_lag()
    stats = ctx.stats
    return {
        "brokerVersionDesc": f"TideMQ {VERSION} (V5_3_3 protocol)",
        "brokerName": ctx.config.broker_name,
        "brokerAddr": ctx.broker_addr,
        "runtime": uptime_text(stats.started),
        "bootTimestamp": str(int(stats.started * 1000)),
        "storeStatus": store.status,
        "putTps": f"{stats.put_msgs.rate():.1f}",
        "getTransferedTps": f"{stats.get_msgs.rate():.1f}",
        "msgPutTotalTodayNow": str(stats.put_msgs.total),
        "msgGetTotalTodayNow": str(stats.get_msgs.total),
        "msgPutTotalTodayMorning": str(stats.put_today_morning),
        "msgGetTotalTodayMorning": str(stats.get_today_morning),
        "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
        "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
        "commitLogMinOffset": str(store.commitlog.min_offset),
        "commitLogMaxOffset": str(store.commitlog.max_offset),
        "commitLogDiskRatio": f"{disk_usage_ratio(str(ctx.layout.root)):.4f}",
        "dispatchBehindBytes": str(behind),
        "dispatchLagMs": f"{lag_ms:.0f}",
        "pullHeldCount": str(ctx.holds.held_count),
        "topicCount": str(len(ctx.topics.topics)),
        "connectionCount": str(len(ctx.server.connections)),
        "earliestMessageTimeStamp": str(earliest_message_time(store)),
        **_lmq_info(store),
        **ctx.replication.runtime_info(),
    }


def _lmq_info(store: MessageStore) -> dict[str, str]:
    lmq = store.lmq
    if lmq is None:
        return {"lmqEnabled": "false"}
    figures = lmq.cached_stats()
    if figures is None:  # not counted yet: a walk has started
        return {"lmqEnabled": "true"}
    queues, entries = figures
    return {"lmqEnabled": "true", "lmqCount": str(queues), "lmqEntries": str(entries)}

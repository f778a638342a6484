"""A cluster's settings, metadata and figures as mqadmin's ``exportConfigs``,
``exportMetadata`` and ``exportMetrics`` write them (upstream's JSON shapes).

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`export_configs`           106 GET_BROKER_CLUSTER_INFO, 26 GET_BROKER_CONFIG on each
                                 master of the cluster
:func:`user_topics`              21 GET_ALL_TOPIC_CONFIG, less the system topics
:func:`user_groups`              201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG, less the system groups
:func:`export_metadata`          both of those on each master of a cluster, merged
:func:`export_metrics`           28 GET_BROKER_RUNTIME_INFO, 26, 21, 201, 315
                                 VIEW_BROKER_STATS_DATA and 203 GET_CONSUMER_CONNECTION_LIST
===============================  ==========================================================

System topics and groups are upstream's (``TopicValidator`` and ``MixAll``'s), and the
topics named after a cluster or a broker, which upstream's brokers list as theirs
(GET_SYSTEM_TOPIC_LIST_FROM_BROKER).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from tidemq.client import config_admin as ca
from tidemq.client import monitor
from tidemq.client.versions import version_name
from tidemq.codec.bodies import encode_body
from tidemq.codec.command import TIDEMQ_VERSION, RemotingCommand, RequestCode
from tidemq.errors import ResponseCode

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["CONFIG_KEYS", "export_configs", "export_metadata", "export_metrics",
           "user_groups", "user_topics"]

#: The broker keys ``exportConfigs`` keeps (upstream's list; a key a broker lacks is left
#: out).
CONFIG_KEYS = ("brokerClusterName", "brokerId", "brokerName", "brokerRole",
               "fileReservedTime", "filterServerNums", "flushDiskType", "maxMessageSize",
               "messageDelayLevel", "msgTraceTopicName", "slaveReadEnable", "traceOn",
               "traceTopicEnable", "useTLS", "autoCreateTopicEnable",
               "autoCreateSubscriptionGroup")

SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC"})
SYSTEM_GROUPS = frozenset({
    "DEFAULT_CONSUMER", "DEFAULT_PRODUCER", "TOOLS_CONSUMER", "SCHEDULE_CONSUMER",
    "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "CID_RMQ_SYS_TRANS"})
_PERMS = frozenset({2, 4, 6})


def _is_user_topic(name: str, perm: int, own: frozenset[str], special: bool) -> bool:
    if name in SYSTEM_TOPICS or name in own or name.startswith("rmq_sys_"):
        return False
    if not special and name.startswith(("%RETRY%", "%DLQ%")):
        return False
    return perm in _PERMS


async def _names(admin: AdminClient) -> frozenset[str]:
    """The cluster and broker names: topics of those names are the brokers' own."""
    info = await admin.cluster_info()
    return frozenset(info.cluster_addr_table) | frozenset(info.broker_addr_table)


async def user_topics(admin: AdminClient, addr: str, *, special: bool = False
                      ) -> dict[str, Any]:
    """Broker ``addr``'s TopicConfigSerializeWrapper without the system topics (nor, unless
    ``special``, the retry and dead-letter topics), as JSON."""
    own = await _names(admin)
    wrapper = await monitor.topic_configs(admin, addr)
    body: dict[str, Any] = json.loads(encode_body(wrapper))
    body["topicConfigTable"] = {
        name: tc for name, tc in sorted(body.get("topicConfigTable", {}).items())
        if _is_user_topic(name, int(tc.get("perm", 0)), own, special)}
    return body


async def user_groups(admin: AdminClient, addr: str) -> dict[str, Any]:
    """Broker ``addr``'s SubscriptionGroupWrapper without the system groups."""
    response = await admin.request(addr, RemotingCommand.request(
        RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    body: dict[str, Any] = json.loads(response.full_body())
    body["subscriptionGroupTable"] = {
        name: cfg for name, cfg in sorted(body.get("subscriptionGroupTable", {}).items())
        if name not in SYSTEM_GROUPS and not name.startswith("CID_RMQ_SYS_")}
    return body


async def _masters_and_replicas(admin: AdminClient, cluster: str) -> dict[str, list[str]]:
    """Master address -> its replicas' addresses, for each broker name of ``cluster``."""
    by_name: dict[str, dict[int, str]] = {}
    for b in await admin.cluster_list(cluster):
        by_name.setdefault(b.broker_name, {})[b.broker_id] = b.address
    return {ids[0]: [a for i, a in sorted(ids.items()) if i != 0]
            for ids in by_name.values() if 0 in ids}


async def export_configs(admin: AdminClient, cluster: str) -> dict[str, Any]:
    """``configs.json``: each master's main keys by broker name, and the cluster's scale."""
    configs: dict[str, dict[str, str]] = {}
    replicas = 0
    for master, slaves in sorted((await _masters_and_replicas(admin, cluster)).items()):
        props = await ca.broker_config(admin, master)
        replicas += len(slaves)
        configs[props.get("brokerName", master)] = {k: props[k] for k in CONFIG_KEYS
                                                    if k in props}
    return {"brokerConfigs": configs,
            "clusterScale": {"namesrvSize": len(admin.config.namesrv_addr),
                             "masterBrokerSize": len(configs),
                             "slaveBrokerSize": replicas}}


async def export_metadata(admin: AdminClient, cluster: str, *, special: bool = False
                          ) -> dict[str, Any]:
    """The user topics and groups of every master of ``cluster``, merged: a topic's queue
    numbers and a group's retry queue numbers summed over the brokers (as upstream)."""
    topics: dict[str, dict[str, Any]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for addr in sorted((await admin.masters(cluster)).values()):
        for name, tc in (await user_topics(admin, addr, special=special))[
                "topicConfigTable"].items():
            seen = topics.get(name)
            if seen is not None:
                tc["writeQueueNums"] = tc.get("writeQueueNums", 0) + seen.get("writeQueueNums", 0)
                tc["readQueueNums"] = tc.get("readQueueNums", 0) + seen.get("readQueueNums", 0)
            topics[name] = tc
        for name, cfg in (await user_groups(admin, addr))["subscriptionGroupTable"].items():
            seen = groups.get(name)
            if seen is not None:
                cfg["retryQueueNums"] = cfg.get("retryQueueNums", 0) + seen.get(
                    "retryQueueNums", 0)
            groups[name] = cfg
    return {"topicConfigTable": dict(sorted(topics.items())),
            "subscriptionGroupTable": dict(sorted(groups.items())),
            "exportTime": int(time.time() * 1000)}


async def _stats(admin: AdminClient, addr: str, topic: str) -> tuple[float, int]:
    """The put TPS of the last minute and the puts of the last day of ``topic`` (0, 0 when
    the broker has no count for it)."""
    response = await admin.instance.request(addr, RemotingCommand.request(
        RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": topic}))
    if response.code != ResponseCode.SUCCESS:
        return 0.0, 0
    body = json.loads(response.full_body())
    return float(body["statsMinute"]["tps"]), int(body["statsDay"]["sum"])


def _float(text: str | None) -> float:
    try:
        return float((text or "0").split(" ")[0])
    except ValueError:
        return 0.0


def _int(text: str | None) -> int:
    try:
        return int(text or "0")
    except ValueError:
        return 0


async def _client_info(admin: AdminClient, groups: list[str]) -> list[str]:
    seen: set[str] = set()
    for group in groups:
        for conn in await monitor.consumer_connections(admin, group):
            seen.add(f"{conn.get('language')}%{version_name(conn.get('version'))}")
    return sorted(seen)


async def export_metrics(admin: AdminClient, cluster: str) -> dict[str, Any]:
    """``metrics.json``: per broker name its master's environment, TPS and daily counts
    and its consumers' client versions, with the cluster's totals."""
    report: dict[str, Any] = {}
    total_tps = dict.fromkeys(("totalNormalInTps", "totalNormalOutTps", "totalTransInTps",
                               "totalScheduleInTps"), 0.0)
    total_day = dict.fromkeys(("normalOneDayInNum", "normalOneDayOutNum", "transOneDayInNum",
                               "scheduleOneDayInNum"), 0)
    for name, addr in sorted((await admin.masters(cluster)).items()):
        kv = await admin.broker_status(addr)
        props = await ca.broker_config(admin, addr)
        groups = sorted((await user_groups(admin, addr))["subscriptionGroupTable"])
        trans_tps, trans_day = await _stats(admin, addr, "RMQ_SYS_TRANS_HALF_TOPIC")
        sched_tps, sched_day = await _stats(admin, addr, "SCHEDULE_TOPIC_XXXX")
        tps = {"normalInTps": _float(kv.get("putTps")),
               "normalOutTps": _float(kv.get("getTransferedTps")),
               "transInTps": trans_tps, "scheduleInTps": sched_tps}
        day = {"normalOneDayInNum": _int(kv.get("msgPutTotalTodayMorning"))
               - _int(kv.get("msgPutTotalYesterdayMorning")),
               "normalOneDayOutNum": _int(kv.get("msgGetTotalTodayMorning"))
               - _int(kv.get("msgGetTotalYesterdayMorning")),
               "transOneDayInNum": trans_day, "scheduleOneDayInNum": sched_day}
        for key, value in zip(total_tps, tps.values(), strict=True):
            total_tps[key] += value
        for key, value in day.items():
            total_day[key] += value
        report[name] = {
            "runtimeEnv": {"cpuNum": props.get("clientCallbackExecutorThreads"),
                           "totalMemKBytes": kv.get("totalMemKBytes")},
            "runtimeQuota": {
                "diskRatio": {"commitLogDiskRatio": kv.get("commitLogDiskRatio"),
                              "consumeQueueDiskRatio": kv.get("consumeQueueDiskRatio")},
                "tps": tps, "oneDayNum": day},
            "runtimeVersion": {"rocketmqVersion": version_name(TIDEMQ_VERSION),
                               "clientInfo": await _client_info(admin, groups)}}
    return {"evaluateReport": report,
            "totalData": {"totalTps": total_tps, "totalOneDayNum": total_day}}

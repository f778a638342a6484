"""Broker housekeeping an operator asks for: ``mqadmin cleanUnusedTopic`` (316
CLEAN_UNUSED_TOPIC), ``cleanExpiredCQ`` (306 CLEAN_EXPIRED_CONSUMEQUEUE) and
``deleteExpiredCommitLog`` (329 DELETE_EXPIRED_COMMITLOG), and the
ordered-topic settings of ``updateOrderConf`` (the name servers' KV config, namespace
``ORDER_TOPIC_CONFIG``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidemq.codec.command import RemotingCommand, RequestCode

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["ORDER_TOPIC_CONFIG", "clean_expired_queues", "clean_unused_topics",
           "delete_expired_commit_log"]

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


async def clean_unused_topics(admin: AdminClient, addrs: list[str]) -> dict[str, int]:
    """Each broker drops the queues of topics its topic table no longer has; returns how
    many topics each cleaned."""
    out: dict[str, int] = {}
    for addr in addrs:
        response = await admin.request(addr, RemotingCommand.request(
            RequestCode.CLEAN_UNUSED_TOPIC))
        out[addr] = int(response.ext_fields.get("cleanedTopics", "0"))
    return out


async def clean_expired_queues(admin: AdminClient, addrs: list[str]) -> dict[str, int]:
    """Each broker moves its queues' minimums past the commit log's start and drops the
    files below; returns how many queues moved on each."""
    out: dict[str, int] = {}
    for addr in addrs:
        response = await admin.request(addr, RemotingCommand.request(
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE))
        out[addr] = int(response.ext_fields.get("correctedQueues", "0"))
    return out


async def delete_expired_commit_log(admin: AdminClient, addrs: list[str]) -> dict[str, int]:
    """Each broker deletes its commit-log segments older than its ``fileReservedTime`` now,
    whatever its hour of deletion; returns how many segments each deleted."""
    out: dict[str, int] = {}
    for addr in addrs:
        response = await admin.request(addr, RemotingCommand.request(
            RequestCode.DELETE_EXPIRED_COMMITLOG))
        out[addr] = int(response.ext_fields.get("deletedSegments", "0"))
    return out

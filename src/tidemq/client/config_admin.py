"""Broker and name-server configuration and write permissions, as mqadmin's commands
do them.

Every operation takes a started :class:`~tidemq.client.admin.AdminClient`.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`broker_config`            26 GET_BROKER_CONFIG (body: properties text)
:func:`update_broker_config`     25 UPDATE_BROKER_CONFIG on each address
:func:`namesrv_config`           319 GET_NAMESRV_CONFIG on each name server
:func:`update_namesrv_config`    318 UPDATE_NAMESRV_CONFIG on each name server
:func:`update_topic_perm`        351 GET_TOPIC_CONFIG, then 17 UPDATE_AND_CREATE_TOPIC with
                                 the new permission and everything else kept
:func:`change_write_perm`        205 WIPE_WRITE_PERM_OF_BROKER / 327 ADD_WRITE_PERM_OF_BROKER
                                 on each name server
:func:`topic_clusters`           105 GET_ROUTEINFO_BY_TOPIC and 106 GET_BROKER_CLUSTER_INFO
===============================  ==========================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidemq.codec.bodies import TopicConfigSerializeWrapper, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    CreateTopicRequestHeader,
    GetTopicConfigRequestHeader,
    format_attributes,
)
from tidemq.errors import ResponseCode, error_for_code
from tidemq.formats.javaprops import parse_properties, properties_text

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["PermChange", "broker_config", "change_write_perm", "namesrv_config",
           "topic_clusters", "update_broker_config", "update_namesrv_config",
           "update_topic_perm"]


@dataclasses.dataclass(frozen=True, slots=True)
class PermChange:
    """One broker's topic permission before and after :func:`update_topic_perm`."""

    broker_addr: str
    old_perm: int
    new_perm: int


def _props(response: RemotingCommand, addr: str) -> dict[str, str]:
    try:
        return dict(sorted(parse_properties(bytes(response.full_body()).decode("utf-8"))
                           .items()))
    except UnicodeDecodeError as exc:
        raise error_for_code(ResponseCode.SYSTEM_ERROR,
                             f"config from {addr} is not UTF-8: {exc}", address=addr) from None


async def broker_config(admin: AdminClient, addr: str) -> dict[str, str]:
    """Every key of the broker at ``addr`` with its current value (secrets masked)."""
    response = await admin.request(addr, RemotingCommand.request(
        RequestCode.GET_BROKER_CONFIG))
    return _props(response, addr)


async def update_broker_config(admin: AdminClient, addrs: list[str],
                               changes: Mapping[str, str]) -> None:
    """Change run-time keys on each broker of ``addrs``; a broker refuses a key that
    cannot change while it runs (INVALID_PARAMETER naming the key)."""
    body = properties_text(changes).encode("utf-8")
    for addr in addrs:
        await admin.request(addr, RemotingCommand.request(
            RequestCode.UPDATE_BROKER_CONFIG, body=body))


async def namesrv_config(admin: AdminClient) -> dict[str, dict[str, str]]:
    """Each name server's keys, by its address."""
    out: dict[str, dict[str, str]] = {}
    for addr in admin.config.namesrv_addr:
        response = await admin.request(addr, RemotingCommand.request(
            RequestCode.GET_NAMESRV_CONFIG))
        out[addr] = _props(response, addr)
    return out


async def update_namesrv_config(admin: AdminClient, changes: Mapping[str, str]
                                ) -> list[str]:
    """Change run-time keys on every name server; returns their addresses."""
    body = properties_text(changes).encode("utf-8")
    addrs = list(admin.config.namesrv_addr)
    for addr in addrs:
        await admin.request(addr, RemotingCommand.request(
            RequestCode.UPDATE_NAMESRV_CONFIG, body=body))
    return addrs


async def update_topic_perm(admin: AdminClient, topic: str, perm: int, addrs: list[str]
                            ) -> list[PermChange]:
    """Set ``topic``'s permission on each broker of ``addrs`` (that holds it), keeping
    its queues, flags and attributes."""
    changes: list[PermChange] = []
    for addr in addrs:
        ext = GetTopicConfigRequestHeader(topic=topic).to_ext()
        response = await admin.instance.request(addr, RemotingCommand.request(
            RequestCode.GET_TOPIC_CONFIG, ext))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            continue
        wrapper = decode_body(_checked(response, addr).full_body(),
                              TopicConfigSerializeWrapper)
        tc = wrapper.topic_config_table[topic]
        header = CreateTopicRequestHeader(
            topic=topic, default_topic=admin.config.default_topic,
            read_queue_nums=tc.read_queue_nums, write_queue_nums=tc.write_queue_nums,
            perm=perm, topic_filter_type=tc.topic_filter_type.value,
            topic_sys_flag=tc.topic_sys_flag, order=tc.order,
            attributes=format_attributes(dict(tc.attributes)) if tc.attributes else None)
        await admin.request(addr, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()))
        changes.append(PermChange(addr, tc.perm, perm))
    if not changes:
        raise error_for_code(ResponseCode.TOPIC_NOT_EXIST,
                             f"topic {topic} is on none of {', '.join(addrs)}")
    admin.instance.routes.forget(topic)
    return changes


def _checked(response: RemotingCommand, addr: str) -> RemotingCommand:
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=addr)
    return response


async def change_write_perm(admin: AdminClient, broker_name: str, *, writable: bool
                            ) -> dict[str, int]:
    """Take (``writable`` false) or give back the write permission of ``broker_name``'s
    queues on every name server; returns how many topics changed on each."""
    code = (RequestCode.ADD_WRITE_PERM_OF_BROKER if writable
            else RequestCode.WIPE_WRITE_PERM_OF_BROKER)
    key = "addTopicCount" if writable else "wipeTopicCount"
    out: dict[str, int] = {}
    for addr in admin.config.namesrv_addr:
        response = await admin.request(addr, RemotingCommand.request(
            code, {"brokerName": broker_name}))
        out[addr] = int(response.ext_fields.get(key, "0"))
    return out


async def topic_clusters(admin: AdminClient, topic: str) -> list[str]:
    """The clusters whose brokers serve ``topic``."""
    route = await admin.topic_route(topic)
    names = {q.broker_name for q in route.queue_datas}
    info = await admin.cluster_info()
    return sorted(cluster for cluster, brokers in info.cluster_addr_table.items()
                  if names.intersection(brokers))

"""Producer and consumer tables: who is connected, in which groups, subscribed to what.

Filled by HEART_BEAT, emptied by UNREGISTER_CLIENT, by the connection closing, or after
``channelExpiredTimeout`` without a heartbeat. A change in a consumer group's membership
is reported to the caller, which notifies the group's members (NOTIFY_CONSUMER_IDS_CHANGED).
State changes are decided here synchronously; sending is the caller's job.
"""

from __future__ import annotations

import dataclasses
import time

from tidemq.codec.bodies import ConsumerData, HeartbeatData
from tidemq.net import Connection

__all__ = ["ClientChannel", "ConsumerGroupInfo", "ConsumerManager", "ProducerManager"]


@dataclasses.dataclass(eq=False, slots=True)
class ClientChannel:
    client_id: str
    conn: Connection
    language: str
    version: int
    last_update: float = dataclasses.field(default_factory=time.monotonic)


@dataclasses.dataclass(slots=True)
class ConsumerGroupInfo:
    group: str
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""
    channels: dict[str, ClientChannel] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, str] = dataclasses.field(default_factory=dict)  # topic -> expr


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[str, ClientChannel]] = {}

    def register(self, group: str, channel: ClientChannel) -> None:
        self.groups.setdefault(group, {})[channel.client_id] = channel

    def unregister(self, group: str, client_id: str) -> None:
        members = self.groups.get(group)
        if members is not None:
            members.pop(client_id, None)
            if not members:
                del self.groups[group]

    def drop_connection(self, conn: Connection) -> None:
        for group in list(self.groups):
            for cid, ch in list(self.groups[group].items()):
                if ch.conn is conn:
                    self.unregister(group, cid)

    def expire(self, max_idle: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for group in list(self.groups):
            for cid, ch in list(self.groups[group].items()):
                if now - ch.last_update > max_idle:
                    self.unregister(group, cid)


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def register(self, data: ConsumerData, channel: ClientChannel) -> bool:
        """Record a heartbeat; returns whether the group's member set changed."""
        info = self.groups.get(data.group_name)
        if info is None:
            info = self.groups[data.group_name] = ConsumerGroupInfo(data.group_name)
        info.consume_type = str(data.consume_type)
        info.message_model = str(data.message_model)
        info.consume_from_where = str(data.consume_from_where)
        for sub in data.subscription_data_set:
            info.subscriptions[sub.topic] = sub.sub_string
        changed = channel.client_id not in info.channels
        old = info.channels.get(channel.client_id)
        if old is not None and old.conn is not channel.conn:
            changed = True
        info.channels[channel.client_id] = channel
        return changed

    def unregister(self, group: str, client_id: str) -> bool:
        info = self.groups.get(group)
        if info is None or info.channels.pop(client_id, None) is None:
            return False
        if not info.channels:
            del self.groups[group]
        return True

    def drop_connection(self, conn: Connection) -> list[str]:
        """Forget every membership on ``conn``; returns the groups whose members changed."""
        changed = []
        for group, info in list(self.groups.items()):
            for cid, ch in list(info.channels.items()):
                if ch.conn is conn and self.unregister(group, cid):
                    changed.append(group)
        return changed

    def expire(self, max_idle: float, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        changed = []
        for group, info in list(self.groups.items()):
            for cid, ch in list(info.channels.items()):
                if now - ch.last_update > max_idle and self.unregister(group, cid):
                    changed.append(group)
        return changed

    def client_ids(self, group: str) -> list[str]:
        info = self.groups.get(group)
        return sorted(info.channels) if info is not None else []

    def channels(self, group: str) -> list[ClientChannel]:
        info = self.groups.get(group)
        return list(info.channels.values()) if info is not None else []

    def subscription(self, group: str, topic: str) -> str | None:
        info = self.groups.get(group)
        return info.subscriptions.get(topic) if info is not None else None


def heartbeat_channels(data: HeartbeatData, conn: Connection, language: str,
                       version: int) -> ClientChannel:
    return ClientChannel(data.client_id, conn, language, version)

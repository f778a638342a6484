"""Subscription group configs: retry queue count and max reconsume times per group.

Auto-created on first heartbeat when ``autoCreateSubscriptionGroup`` (the default);
persisted to ``config/subscriptionGroup.json``.
"""

from __future__ import annotations

import json
from typing import Any

from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["SubscriptionGroupManager"]


class SubscriptionGroupManager:
    def __init__(self, layout: StoreLayout, *, auto_create: bool, retry_max_times: int) -> None:
        self.path = layout.config_file("subscriptionGroup.json")
        self.auto_create = auto_create
        self.retry_max_times = retry_max_times
        self.groups: dict[str, dict[str, Any]] = {}

    def load(self) -> None:
        if self.path.exists():
            self.groups = json.loads(self.path.read_text("utf-8")).get("subscriptionGroupTable", {})

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"subscriptionGroupTable": self.groups},
                                           sort_keys=True).encode())

    def ensure(self, group: str) -> dict[str, Any] | None:
        cfg = self.groups.get(group)
        if cfg is None and self.auto_create:
            cfg = self.upsert(group, {})
        return cfg

    def upsert(self, group: str, changes: dict[str, Any]) -> dict[str, Any]:
        cfg = self.groups.get(group) or {
            "groupName": group, "consumeEnable": True, "consumeBroadcastEnable": True,
            "retryQueueNums": 1, "retryMaxTimes": self.retry_max_times, "brokerId": 0,
            "consumeMessageOrderly": False,
        }
        cfg.update(changes)
        self.groups[group] = cfg
        self.persist()
        return cfg

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self.persist()
        return True

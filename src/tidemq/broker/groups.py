"""Subscription group configs: retry queue count, max reconsume times and the rest of
RocketMQ's ``SubscriptionGroupConfig`` per group.

Auto-created on first heartbeat when ``autoCreateSubscriptionGroup`` (the default), or
created and replaced by UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200); persisted atomically to
``config/subscriptionGroup.json`` as ``{"subscriptionGroupTable": {group: config},
"dataVersion": {...}}`` (upstream's file shape). :func:`validate_group_config` checks a
config received from an admin client against the Java bean's members and types.

Thousands of groups take a while to encode, so the file is written a slice of the table
at a time (:func:`~tidemq.broker.offset_json.table_json`) and, where nobody waits for it
on the event loop, on a thread: an auto-created group's write is started on a thread and
not waited for (a group lost with it is created again by the next heartbeat, with the
same defaults); an admin's change is written on a thread before it is answered
(:class:`~tidemq.broker.table_file.TableFile`). A config is replaced on a change, never
changed in place, so a copy of the table can be encoded on a thread.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from tidemq.broker.offset_json import COMPACT, SPACED, table_json
from tidemq.broker.table_file import TableFile
from tidemq.broker.table_json import read_table
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["GROUP_DEFAULTS", "SubscriptionGroupManager", "validate_group_config"]

#: The file's (and GET_ALL_SUBSCRIPTIONGROUP_CONFIG's) table member.
TABLE = "subscriptionGroupTable"

#: Java ``SubscriptionGroupConfig`` defaults (``retryMaxTimes`` is the broker's
#: ``maxReconsumeTimes``).
GROUP_DEFAULTS: dict[str, Any] = {
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeBroadcastEnable": True,
    "consumeMessageOrderly": False,
    "retryQueueNums": 1,
    "retryMaxTimes": 16,
    "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
    "groupSysFlag": 0,
    "consumeTimeoutMinute": 15,
    "attributes": {},
}

_BOOLS = ("consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable",
          "consumeMessageOrderly", "notifyConsumerIdsChangedEnable")
#: int members and their smallest legal value
_INTS = {"retryQueueNums": 0, "retryMaxTimes": -1, "brokerId": 0,
         "whichBrokerWhenConsumeSlowly": 0, "groupSysFlag": 0, "consumeTimeoutMinute": 0}
_MAX_INT = 2**31 - 1
_GROUP_RE = re.compile(r"^[A-Za-z0-9%_|-]{1,255}$")
_INT_TEXT = re.compile(r"^-?[0-9]{1,10}$")


def _bool(name: str, value: Any) -> bool | str:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return f"{name} must be a boolean, not {value!r:.40}"


def _int(name: str, value: Any, lowest: int) -> int | str:
    if isinstance(value, str) and _INT_TEXT.match(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return f"{name} must be an integer, not {value!r:.40}"
    if not lowest <= value <= _MAX_INT:
        return f"{name} must be in {lowest}..{_MAX_INT}, not {value}"
    return value


def validate_group_config(raw: Any, defaults: dict[str, Any] | None = None
                          ) -> dict[str, Any] | str:
    """A complete config from a ``SubscriptionGroupConfig`` JSON value, members it lacks
    taken from ``defaults`` (:data:`GROUP_DEFAULTS`), or why it is refused. Unknown
    members are dropped."""
    if not isinstance(raw, dict):
        return "the body must be a SubscriptionGroupConfig JSON object"
    name = raw.get("groupName")
    if not isinstance(name, str) or not _GROUP_RE.match(name):
        return "groupName must be 1..255 characters of [A-Za-z0-9%_|-]"
    cfg: dict[str, Any] = {**(GROUP_DEFAULTS if defaults is None else defaults),
                           "groupName": name}
    for key in _BOOLS:
        if raw.get(key) is not None:
            value = _bool(key, raw[key])
            if isinstance(value, str):
                return value
            cfg[key] = value
    for key, lowest in _INTS.items():
        if raw.get(key) is not None:
            number = _int(key, raw[key], lowest)
            if isinstance(number, str):
                return number
            cfg[key] = number
    attributes = raw.get("attributes")
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
        return "attributes must be an object of strings"
    cfg["attributes"] = dict(attributes)
    for key, kind in (("groupRetryPolicy", dict), ("subscriptionDataSet", list)):
        if raw.get(key) is not None:
            if not isinstance(raw[key], kind):
                return f"{key} must be a JSON {'object' if kind is dict else 'array'}"
            cfg[key] = raw[key]
    return cfg


def _groups_of(data: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, int] | None]:
    """The groups and the data version of the file's content."""
    groups, version = data.get(TABLE, {}), data.get("dataVersion")
    if not isinstance(groups, dict) or not all(isinstance(g, dict) for g in groups.values()):
        raise TypeError(f"{TABLE} is not an object of group configs")
    if version is not None and not isinstance(version, dict):
        raise TypeError("dataVersion is not an object")
    return groups, version


class SubscriptionGroupManager:
    def __init__(self, layout: StoreLayout, *, auto_create: bool, retry_max_times: int) -> None:
        self.path = layout.config_file("subscriptionGroup.json")
        self.auto_create = auto_create
        self.retry_max_times = retry_max_times
        self.groups: dict[str, dict[str, Any]] = {}
        self.data_version: dict[str, int] = {"stateVersion": 0,
                                             "timestamp": int(time.time() * 1000), "counter": 0}
        #: When the file is written: at once after a change, or on a thread after a
        #: change made in ``file.deferred()``.
        self.file = TableFile(self._write, "the subscription groups")

    def load(self) -> None:
        """Read the file (none: no groups); one that does not read stops the start
        (:func:`~tidemq.broker.table_json.read_table`)."""
        loaded = read_table(self.path, _groups_of)
        if loaded is not None:
            self.groups, version = loaded
            self.data_version = version or self.data_version

    def persist(self) -> None:
        """Write the table now. Safe from another thread, and meant to run on one at scale
        (:class:`~tidemq.broker.table_file.TableFile`)."""
        self.file.write()

    def _write(self) -> None:
        data = self.encode(SPACED)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, data)

    def encode(self, separators: tuple[str, str] = COMPACT) -> bytes:
        """The GET_ALL_SUBSCRIPTIONGROUP_CONFIG body (the file's content with the file's
        separators), a slice of groups a call; safe from another thread (the table is
        copied first, one C call)."""
        return table_json(TABLE, self.groups.copy(), {"dataVersion": self.data_version},
                          separators)

    def _changed(self) -> None:
        self.data_version = {"stateVersion": self.data_version.get("stateVersion", 0),
                             "timestamp": int(time.time() * 1000),
                             "counter": self.data_version.get("counter", 0) + 1}
        self.file.changed()

    def differs(self, groups: Mapping[str, Any]) -> bool:
        """Whether ``groups`` is not this table. Safe from another thread, and meant to
        run on one for thousands of groups: a group at a time (one lookup and one
        config's comparison each), so the event loop takes turns."""
        mine = self.groups
        return len(groups) != len(mine) or any(
            mine.get(name) != cfg for name, cfg in groups.items())

    def replace(self, wrapper: dict[str, Any], *, differs: bool | None = None) -> bool:
        """Take a GET_ALL_SUBSCRIPTIONGROUP_CONFIG body whole (a replica copying its
        master; written on a thread); returns whether anything changed. ``differs``:
        whether its table differs from this one (:meth:`differs`, made on a thread for a
        large table); without it the tables are compared here."""
        groups = wrapper.get(TABLE, {})
        if not (groups != self.groups if differs is None else differs):
            return False
        self.groups = groups
        self.data_version = wrapper.get("dataVersion", self.data_version)
        with self.file.deferred():
            self.file.changed()
        self.file.write_soon()
        return True

    def defaults(self, group: str) -> dict[str, Any]:
        return {"groupName": group, **GROUP_DEFAULTS, "retryMaxTimes": self.retry_max_times,
                "attributes": {}}

    def ensure(self, group: str) -> dict[str, Any] | None:
        """The group's config; one with the defaults if it has none and groups are
        created on demand (written on a thread, not waited for)."""
        cfg = self.groups.get(group)
        if cfg is None and self.auto_create:
            with self.file.deferred():
                cfg = self.upsert(group, {})
            self.file.write_soon()
        return cfg

    def upsert(self, group: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Merge ``changes`` into the group's config (created with defaults if missing),
        as a new config."""
        cfg = {**(self.groups.get(group) or self.defaults(group)), **changes}
        self.groups[group] = cfg
        self._changed()
        return cfg

    def put(self, cfg: dict[str, Any]) -> None:
        """Replace a whole config (from :func:`validate_group_config`)."""
        self.groups[cfg["groupName"]] = cfg
        self._changed()

    def delete(self, group: str) -> bool:
        if self.groups.pop(group, None) is None:
            return False
        self._changed()
        return True


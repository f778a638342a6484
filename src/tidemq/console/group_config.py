"""A consumer group's subscription-group config, created, changed and deleted from the
console, as RocketMQ Dashboard's group page does (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
DELETE_SUBSCRIPTIONGROUP on every master), and the groups read from the masters, a
master that does not answer named rather than failing the whole list.

The brokers replace a group's config whole, so the form carries every member the page
shows, filled in from the config the brokers hold (or the defaults for a new group).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from tidemq.client import group_admin, monitor
from tidemq.console.model import parse_form
from tidemq.errors import TideMQError

if TYPE_CHECKING:
    from tidemq.client import AdminClient
    from tidemq.console.site import Console

log = logging.getLogger(__name__)

__all__ = ["FIELDS", "GroupForm", "group_delete", "group_form", "group_submit", "read_groups"]

#: The members the form edits: (name, label, kind); kind "bool" or the smallest int.
FIELDS: tuple[tuple[str, str, str | int], ...] = (
    ("consumeEnable", "Consume enabled", "bool"),
    ("consumeBroadcastEnable", "Broadcast allowed", "bool"),
    ("consumeFromMinEnable", "Consume from min", "bool"),
    ("consumeMessageOrderly", "Orderly", "bool"),
    ("retryQueueNums", "Retry queues", 0),
    ("retryMaxTimes", "Retry max times", -1),
    ("brokerId", "Consume from broker id", 0),
    ("whichBrokerWhenConsumeSlowly", "Broker id when slow", 0),
)

#: What a new group's form shows (the brokers' own defaults, as updateSubGroup sends).
NEW_GROUP: dict[str, Any] = {
    "consumeEnable": True, "consumeBroadcastEnable": False, "consumeFromMinEnable": False,
    "consumeMessageOrderly": False, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
}

_GROUP = re.compile(r"^[A-Za-z0-9%_|-]{1,255}$")


@dataclasses.dataclass(frozen=True)
class GroupForm:
    """A group config read from a posted form, or why it is refused."""

    config: dict[str, Any]
    error: str | None = None


def group_form(form: Mapping[str, str], current: Mapping[str, Any] | None = None
               ) -> GroupForm:
    """The config ``form`` asks for: :data:`FIELDS` from the form (a checkbox left out
    is false), every other member kept from ``current`` (the config the brokers hold)."""
    name = form.get("group", "").strip()
    config: dict[str, Any] = {**(current or {}), "groupName": name}
    if not _GROUP.match(name):
        return GroupForm(config, "a group name is 1..255 characters of A-Z a-z 0-9 % _ | -")
    for key, label, kind in FIELDS:
        if kind == "bool":
            config[key] = form.get(key) in ("true", "on")
            continue
        raw = form.get(key, "").strip()
        try:
            value = int(raw)
        except ValueError:
            return GroupForm(config, f"{label} must be a whole number, not {raw[:40]!r}")
        if not int(kind) <= value <= 2**31 - 1:
            return GroupForm(config, f"{label} must be at least {kind}, not {value}")
        config[key] = value
    return GroupForm(config)


async def read_groups(admin: AdminClient) -> tuple[
        dict[str, str], dict[str, dict[str, Any]], dict[str, list[str]], dict[str, str]]:
    """Master name -> address; every group's config and the topics it has offsets of,
    merged over the masters that answered; master name -> why it could not be read."""
    masters = await admin.masters()

    async def one(addr: str) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
        held, offsets = await asyncio.gather(
            monitor.subscription_groups(admin, addresses=[addr]),
            monitor.committed_groups(admin, addresses=[addr]))
        return held, offsets

    results = await asyncio.gather(*(one(a) for a in masters.values()),
                                   return_exceptions=True)
    configs: dict[str, dict[str, Any]] = {}
    committed: dict[str, set[str]] = {}
    unread: dict[str, str] = {}
    for (name, addr), result in zip(masters.items(), results, strict=True):
        if isinstance(result, BaseException):
            log.warning("groups of %s: %s", addr, result)
            unread[name] = f"{addr}: {result}"
            continue
        held, offsets = result
        for group, cfg in held.items():
            configs.setdefault(group, cfg)
        for group, topics in offsets.items():
            committed.setdefault(group, set()).update(topics)
    return (masters, configs, {g: sorted(t) for g, t in committed.items()}, unread)


def _back(path: str, msg: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urllib.parse.urlencode({'msg': msg})}", status_code=303)


async def _current(console: Console, group: str) -> dict[str, Any] | None:
    _masters, configs, _committed, _unread = await read_groups(console.admin)
    return configs.get(group)


async def group_submit(console: Console, request: Request) -> Response:
    """Create a group, or replace one's config, on every master."""
    form = parse_form(await request.body())
    name = form.get("group", "").strip()
    current = await _current(console, name) if _GROUP.match(name) else None
    read = group_form(form, current)
    if read.error is not None:
        return console.page("error", request, 400, title="Bad group", error=read.error)
    try:
        addrs = await group_admin.targets(console.admin)
        await group_admin.update_group(console.admin, read.config, addrs)
    except TideMQError as exc:
        return console.page("error", request, 502, title=f"Group {name}",
                            error=f"saving group {name!r} failed: {exc}")
    verb = "updated" if current is not None else "created"
    return _back(f"/groups/{urllib.parse.quote(name, safe='')}",
                 f"Group {name} {verb} on {len(addrs)} broker(s).")


async def group_delete(console: Console, request: Request) -> Response:
    """Delete a group's config (and, when asked, its offsets) on every master, after a
    confirmation page."""
    group = request.path_params["group"]
    quoted = urllib.parse.quote(group, safe="")
    form = parse_form(await request.body()) if request.method == "POST" else {}
    clean = form.get("clean_offset") in ("true", "on")
    if form.get("confirm") != "yes":
        offsets = ("Its stored offsets go too: a consumer of it starting again starts where "
                   "its consume-from setting says." if clean else
                   "Its stored offsets stay: a consumer of it starting again goes on from "
                   "them, and the group is still listed while they are there.")
        return console.page(
            "confirm", request, title=f"Delete {group}", heading=f"Delete consumer group {group}?",
            warning=f"This deletes the subscription-group config of {group} from every master "
                    f"broker. {offsets} Consumers online are not stopped: their next "
                    "heartbeat may create the group again (autoCreateSubscriptionGroup).",
            action=f"/groups/{quoted}/delete",
            fields={"clean_offset": "true" if clean else "false"}, button=f"Delete {group}",
            cancel=f"/groups/{quoted}")
    try:
        addrs = await group_admin.targets(console.admin)
        await group_admin.delete_group(console.admin, group, addrs, clean_offset=clean)
    except TideMQError as exc:
        return console.page("error", request, 502, title=f"Group {group}",
                            error=f"deleting group {group!r} failed: {exc}")
    return _back("/groups", f"Group {group} deleted from {len(addrs)} broker(s)"
                            + (" with its offsets." if clean else "."))

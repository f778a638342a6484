"""The console's Starlette application: one handler per page, all data through
:mod:`tidemq.client` (an :class:`AdminClient`, the dashboard views of
:mod:`tidemq.client.monitor`, and a producer for the send form).

==============================  ======  ============================================
path                            method  what
==============================  ======  ============================================
/cluster                        GET     clusters and brokers: status, disk, TPS, lag
/brokers/{addr}                 GET     one broker's runtime figures
/brokers/{addr}/config          GET     its configuration (26); POST: confirm, then 25
/topics                         GET     topics: queue type, queues, messages, TPS
/topics                         POST    create or update a topic (form)
/topics/{topic}                 GET     queues, offsets, config, update/send forms
/topics/{topic}/send            POST    send one message (form)
/topics/{topic}/messages        GET     messages stored between two times, paged
/topics/{topic}/delete          GET     confirmation page; POST deletes
/groups                         GET     consumer groups with their lag
/groups/{group}                 GET     per-queue lag, consumers, live lag chart
/groups/{group}/reset           POST    confirmation page, then the reset (222)
/api/groups/{group}/lag         GET     JSON the chart polls every 2 s
/api/topics/{topic}/rates       GET     the topic's sampled put/get rates (JSON)
/dlq...                          both    dead-letter queues (:mod:`tidemq.console.dlq`)
/messages                       GET     lookup by id, by key, at an offset
/messages/resend                POST    have one online consumer consume a message (309)
/logical-queues                 GET     the RIP-21 logical-queue mapping tables
/logical-queues                 POST    create a logical topic, migrate a logical queue
/lmq                            GET     light message queue counts per broker
/login                          GET     the login form; POST logs in
/logout                         POST    ends the session
/metrics                        GET     the console's Prometheus metrics
/healthz                        GET     ``ok``
==============================  ======  ============================================

Destructive actions (delete a topic, reset offsets) go through a confirmation page.
Before any handler runs, a request for a name that is not on the Host allow-list is
refused (:mod:`tidemq.console.gate`); every page but ``/login``, ``/metrics`` and
``/healthz`` needs a session, and a state-changing request its session's CSRF token and
an admin (:mod:`tidemq.console.auth`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import logging
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse
from starlette.responses import Response as StarletteResponse
from starlette.routing import Route

from tidemq.client import (
    AdminClient,
    Message,
    MessageExt,
    MessageQueue,
    config_admin,
    dlq_admin,
    group_admin,
    message_scan,
    monitor,
)
from tidemq.client.logical_admin import LogicalQueueAdmin
from tidemq.client.monitor import ConsumeStats, ResetNotSupportedError
from tidemq.client.request_deadline import current as current_deadline
from tidemq.client.request_deadline import request_deadline
from tidemq.client.retry import DLQ_PREFIX
from tidemq.client.trace_view import MessageTrace, query_trace
from tidemq.console.auth import (
    SAFE_METHODS,
    Visitor,
    oversized_form,
    set_session_cookie,
)
from tidemq.console.consumer_info import consumer_page
from tidemq.console.dlq import (
    dlq_export,
    dlq_job_api,
    dlq_job_page,
    dlq_list,
    dlq_page,
    dlq_resend,
)
from tidemq.console.gate import HostGate
from tidemq.console.group_config import FIELDS as GROUP_FIELDS
from tidemq.console.group_config import NEW_GROUP, group_delete, group_submit, read_groups
from tidemq.console.group_list import group_rows, sort_key, sort_of
from tidemq.console.hosts import HostAllowList
from tidemq.console.login import login_page, login_submit, logout, metrics_page
from tidemq.console.model import (
    body_preview,
    is_system_topic,
    owner_group,
    parse_form,
    spark_group,
    version_name,
    when,
)
from tidemq.console.paging import Page, matching, page_of
from tidemq.console.replica_groups import broker_groups
from tidemq.console.site import Console
from tidemq.errors import (
    BrokerResponseError,
    ConnectionLost,
    RequestTimeout,
    ResponseCode,
    TideMQError,
)

__all__ = ["Console", "create_app"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Handler = Callable[[Request], Awaitable[StarletteResponse]]

#: The topic attribute brokers set on a topic with logical queues (its queue count).
LOGICAL_ATTRIBUTE = "logical.queues"
#: Said before resetting a group that may be a Spark query's (model.spark_group).
SPARK_RESET_WARNING = (
    "This group looks like a Spark query's (its name is the Spark source's default "
    "spark-<topic>, or it has stored offsets but no group config and no consumer online). "
    "A Spark query keeps its own offsets in its checkpoint and only copies them to the "
    "brokers for monitoring: resetting them here does not change what the query reads "
    "next. To re-read, start the query with a new checkpoint location and startingOffsets.")
#: Concurrent per-topic / per-group requests while building one page.
FAN_OUT = 8


def _redirect(path: str, msg: str | None = None) -> RedirectResponse:
    if msg:
        path += ("&" if "?" in path else "?") + urllib.parse.urlencode({"msg": msg})
    return RedirectResponse(path, status_code=303)


async def _bounded(calls: Iterable[Awaitable[T]], limit: int = FAN_OUT
                   ) -> list[T | BaseException]:
    sem = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with sem:
            return await call

    return await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)


# ---------------------------------------------------------------------- cluster


async def _broker_rows(admin: AdminClient) -> list[dict[str, Any]]:
    brokers = await admin.cluster_list()
    statuses = await _bounded(admin.broker_status(b.address) for b in brokers)
    rows = []
    for b, s in zip(brokers, statuses, strict=True):
        row = dataclasses.asdict(b)
        row["s"] = s if isinstance(s, dict) else {}
        row["error"] = str(s) if isinstance(s, BaseException) else None
        rows.append(row)
    return rows


async def cluster_page(console: Console, request: Request) -> StarletteResponse:
    admin = console.admin
    rows, topics = await asyncio.gather(_broker_rows(admin), admin.topic_list())

    def total(key: str) -> float:
        return sum(float(r["s"].get(key, 0) or 0) for r in rows)

    lags = [int(float(r["s"].get("dispatchLagMs", 0) or 0)) for r in rows]
    clusters = {r["cluster"] for r in rows}
    brokers = {r["broker_name"] for r in rows}
    user_topics = [t for t in topics if not is_system_topic(t, clusters, brokers)]
    return console.page("cluster", request, title="Cluster", brokers=rows,
                        groups=broker_groups(rows), clusters=sorted(clusters),
                        topic_count=len(user_topics),
                        put_tps=total("putTps"), get_tps=total("getTransferedTps"),
                        max_lag_ms=max(lags, default=0))


async def broker_page(console: Console, request: Request) -> StarletteResponse:
    addr = request.path_params["addr"]
    if not await _known_broker(console.admin, addr):
        return _unknown_broker(console, request, addr)
    status = await console.admin.broker_status(addr)
    return console.page("broker", request, title=f"Broker {addr}", status=status, address=addr)


async def _known_broker(admin: AdminClient, addr: str) -> bool:
    return addr in {b.address for b in await admin.cluster_list()}


def _unknown_broker(console: Console, request: Request, addr: str) -> StarletteResponse:
    return console.page("error", request, 404, title="Unknown broker",
                        error=f"no registered broker has the address {addr}")


async def broker_config_page(console: Console, request: Request) -> StarletteResponse:
    """Every key of one broker with its current value (GET_BROKER_CONFIG), and a form
    to change one; the broker itself decides which keys may change while it runs."""
    addr = request.path_params["addr"]
    if not await _known_broker(console.admin, addr):
        return _unknown_broker(console, request, addr)
    config = await config_admin.broker_config(console.admin, addr)
    return console.page("broker-config", request, title=f"Broker {addr} configuration",
                        address=addr, config=config, key=request.query_params.get("key", ""))


async def broker_config_submit(console: Console, request: Request) -> StarletteResponse:
    addr = request.path_params["addr"]
    form = parse_form(await request.body())
    key, value = form.get("key", ""), form.get("value", "")
    base = f"/brokers/{urllib.parse.quote(addr, safe='')}/config"
    if not key or any(c in key for c in "=:#! \t\r\n"):
        return console.page("error", request, 400, title="Bad form",
                            error="give the name of one configuration key")
    if "\n" in value or "\r" in value:
        return console.page("error", request, 400, title="Bad form",
                            error="a configuration value is one line")
    if not await _known_broker(console.admin, addr):
        return _unknown_broker(console, request, addr)
    if form.get("confirm") != "yes":
        current = (await config_admin.broker_config(console.admin, addr)).get(key)
        was = "is not set" if current is None else f"is {current!r}"
        return console.page(
            "confirm", request, title=f"Change {key}", heading=f"Set {key} on {addr}?",
            warning=f"{key} {was} on the broker at {addr}; it becomes {value!r} at once, "
                    "for every client, and the broker keeps it across restarts (a key set "
                    "by its environment or --set wins again at the next start). The "
                    "broker refuses a key that cannot change while it runs.",
            action=base, fields={"key": key, "value": value}, button=f"Set {key}",
            cancel=base)
    try:
        await config_admin.update_broker_config(console.admin, [addr], {key: value})
    except TideMQError as exc:
        return console.page("error", request, 400, title=f"Broker {addr} configuration",
                            error=f"The broker at {addr} refused to set {key}: {exc}")
    return _redirect(base, f"{key} is now {value!r} on {addr} (until it restarts).")


async def lmq_page(console: Console, request: Request) -> StarletteResponse:
    rows = await _broker_rows(console.admin)
    return console.page("lmq", request, title="LMQ", brokers=rows)


# ---------------------------------------------------------------------- topics


async def _configs(admin: AdminClient, topic: str | None = None
                   ) -> tuple[dict[str, str], dict[str, Any]]:
    """Master name -> address, and address -> its topic-config wrapper (a master whose
    configs cannot be read is left out; :func:`_read_configs` says which)."""
    masters, wrappers, _unread = await _read_configs(admin, topic)
    return masters, wrappers


async def _read_configs(admin: AdminClient, topic: str | None = None
                        ) -> tuple[dict[str, str], dict[str, Any], dict[str, str]]:
    """As :func:`_configs`, and master name -> why its configs could not be read. With
    ``topic``, only the masters its route names are read (every master when the name
    server has no route of it: a topic created a moment ago may not be routed yet), so
    a page about one topic does not wait for a broker that does not hold it."""
    masters = await admin.masters()
    routed = await _routed_masters(admin, topic) if topic is not None else set()
    asked = {n: a for n, a in masters.items() if a in routed} or masters
    results = await _bounded(monitor.topic_configs(admin, a) for a in asked.values())
    wrappers = {}
    unread = {}
    for (name, addr), result in zip(asked.items(), results, strict=True):
        if isinstance(result, BaseException):
            log.warning("topic configs of %s: %s", addr, result)
            unread[name] = f"{addr}: {result}"
            continue
        wrappers[addr] = result
    return masters, wrappers, unread


async def _routed_masters(admin: AdminClient, topic: str) -> set[str]:
    """The master addresses of ``topic``'s route (none when it has no route)."""
    try:
        route = await admin.topic_route(topic)
    except TideMQError as exc:
        log.debug("route of %s: %s", topic, exc)
        return set()
    return {a for b in route.broker_datas if (a := b.master_addr()) is not None}


async def _holders(admin: AdminClient, topic: str) -> list[str]:
    """Addresses of the masters that have ``topic`` (routed or not yet)."""
    _masters, wrappers = await _configs(admin, topic)
    return sorted(a for a, w in wrappers.items() if topic in w.topic_config_table)


async def topics_page(console: Console, request: Request) -> StarletteResponse:
    admin = console.admin
    show_system = request.query_params.get("system") == "1"
    info, names = await asyncio.gather(admin.cluster_info(), admin.topic_list())
    masters, wrappers, unread = await _read_configs(admin)
    by_addr = {addr: name for name, addr in masters.items()}
    per_topic: dict[str, dict[str, Any]] = {}
    for addr, wrapper in wrappers.items():
        for topic, tc in wrapper.topic_config_table.items():
            per_topic.setdefault(topic, {})[by_addr[addr]] = tc
    logical = {t for t, configs in per_topic.items()
               if any(LOGICAL_ATTRIBUTE in c.attributes for c in configs.values())}
    rows = []
    for topic in sorted(set(names) | set(per_topic)):
        system = is_system_topic(topic, info.cluster_addr_table, info.broker_addr_table)
        if system and not show_system:
            continue
        configs = per_topic.get(topic, {})
        first = next(iter(configs.values()), None)
        rows.append({
            "name": topic, "system": system, "logical": topic in logical,
            "queue_type": (first.attributes.get("queue.type", "SimpleCQ") if first else "-"),
            "read_queues": sum(c.read_queue_nums for c in configs.values()),
            "write_queues": sum(c.write_queue_nums for c in configs.values()),
            "brokers": sorted(configs), "perm": _perm(first.perm) if first else "-",
            "messages": None, "put_tps": None,
        })
    listing = page_of(rows, request.query_params, lambda r: str(r["name"]),
                      keep=[("system", "1")] if show_system else [])
    stats = await _bounded(monitor.topic_stats(admin, r["name"], addresses=[
        masters[b] for b in r["brokers"]]) for r in listing.rows)
    for row, st in zip(listing.rows, stats, strict=True):
        if not isinstance(st, BaseException):
            row["messages"], row["put_tps"] = st.messages, st.put_tps
    return console.page("topics", request, title="Topics", topics=listing.rows,
                        listing=listing, show_system=show_system, no_brokers=not masters,
                        clusters=sorted(info.cluster_addr_table),
                        unread=sorted(unread.items()))


def _perm(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-")


async def topic_page(console: Console, request: Request) -> StarletteResponse:
    admin = console.admin
    topic = request.path_params["topic"]
    masters, wrappers, unread = await _read_configs(admin, topic)
    by_addr = {addr: name for name, addr in masters.items()}
    configs = [(by_addr[a], w.topic_config_table[topic]) for a, w in sorted(wrappers.items())
               if topic in w.topic_config_table]
    if not configs and unread:
        return console.page("error", request, 502, title=f"Topic {topic}",
                            error=f"no broker that could be read has a topic named {topic!r}; "
                                  "these could not be read: "
                                  + "; ".join(f"{n} ({why})" for n, why in sorted(unread.items())))
    if not configs:
        return console.page("error", request, 404, title=f"Topic {topic}",
                            error=f"no broker has a topic named {topic!r}")
    holders = [masters[name] for name, _ in configs]
    stats, groups = await asyncio.gather(
        monitor.topic_stats(admin, topic, addresses=holders),
        _groups_of(admin, topic, holders))
    online, progress = await asyncio.gather(
        _bounded(monitor.consumer_connections(admin, g, addresses=holders) for g in groups),
        _bounded(monitor.consume_stats(admin, g, topic, addresses=holders) for g in groups))
    group_rows = [{"name": g, "lag": st.lag if isinstance(st, ConsumeStats) else None,
                   "tps": st.consume_tps if isinstance(st, ConsumeStats) else None,
                   "online": len(conns) if isinstance(conns, list) else None}
                  for g, st, conns in zip(groups, progress, online, strict=True)]
    consumers = [{**c, "group": g, "version_name": version_name(c.get("version"))}
                 for g, conns in zip(groups, online, strict=True)
                 if isinstance(conns, list) for c in conns]
    producer_group = request.query_params.get("producer_group", "").strip()
    producers: list[dict[str, Any]] | None = None
    producer_error = None
    if producer_group:
        try:
            found = await group_admin.producer_connection(admin, producer_group, topic)
            producers = [{**c, "version_name": version_name(c.get("version"))}
                         for c in found.clients]
        except TideMQError as exc:
            producer_error = str(exc)
    first = configs[0][1]
    logical = any(LOGICAL_ATTRIBUTE in c.attributes for _, c in configs)
    return console.page(
        "topic", request, title=f"Topic {topic}", topic=topic, stats=stats, configs=configs,
        queue_type=first.attributes.get("queue.type", "SimpleCQ"), logical=logical,
        read_queues=first.read_queue_nums, write_queues=first.write_queue_nums,
        perm=first.perm, groups=group_rows, rates=_rates(console, topic), consumers=consumers,
        producer_group=producer_group, producers=producers, producer_error=producer_error,
        api_url=f"/api/topics/{urllib.parse.quote(topic, safe='')}/rates")


def _rates(console: Console, topic: str) -> dict[str, Any]:
    return {"put": console.history.get(f"put:{topic}"),
            "get": console.history.get(f"get:{topic}"),
            "interval": console.config.sample_interval}


async def topic_rates_api(console: Console, request: Request) -> StarletteResponse:
    return JSONResponse(_rates(console, request.path_params["topic"]),
                        headers={"Cache-Control": "no-store"})


async def _groups_of(admin: AdminClient, topic: str, addresses: Sequence[str]) -> list[str]:
    return await monitor.topic_consumers(admin, topic, addresses)


async def topic_submit(console: Console, request: Request) -> StarletteResponse:
    form = parse_form(await request.body())
    topic = form.get("topic", "")
    try:
        reads, writes = int(form.get("read_queues", "8")), int(form.get("write_queues", "8"))
        perm = int(form.get("perm", "6"))
    except ValueError:
        return console.page("error", request, 400, title="Bad form",
                            error="queue numbers and permission must be integers")
    attrs: dict[str, str | None] = {}
    if form.get("queue_type") == "BatchCQ":
        attrs["queue.type"] = "BatchCQ"
    try:
        await console.admin.create_topic(
            topic, cluster=form.get("cluster") or None, read_queue_nums=reads,
            write_queue_nums=writes, perm=perm, order=form.get("order") == "true",
            attributes=attrs or None)
    except (TideMQError, ValueError) as exc:
        return console.page("error", request, 400, title=f"Topic {topic}",
                            error=f"creating or updating {topic!r} failed: {exc}")
    return _redirect(f"/topics/{urllib.parse.quote(topic, safe='')}",
                     f"Topic {topic} saved ({reads} read / {writes} write queues).")


async def topic_send(console: Console, request: Request) -> StarletteResponse:
    topic = request.path_params["topic"]
    form = parse_form(await request.body())
    props = {k.upper(): form[k] for k in ("tags", "keys") if form.get(k)}
    # The queue comes from the brokers' own configs: a topic created a moment ago may not
    # be routed by the name server yet, and the default route has other queue counts.
    masters, wrappers = await _configs(console.admin, topic)
    by_addr = {addr: name for name, addr in masters.items()}
    queues = [MessageQueue(topic, by_addr[a], q) for a, w in wrappers.items()
              if (tc := w.topic_config_table.get(topic)) is not None and tc.perm & 2
              for q in range(tc.write_queue_nums)]
    if not queues:
        return console.page("error", request, 404, title=f"Topic {topic}",
                            error=f"no master broker accepts writes to {topic!r}")
    producer = await console.producer()
    result = await producer.send(Message(topic, form.get("body", "").encode("utf-8"), props),
                                 queue=random.choice(queues))
    return _redirect(
        f"/topics/{urllib.parse.quote(topic, safe='')}",
        f"Sent {result.msg_id} to {result.queue.broker_name} queue {result.queue.queue_id} "
        f"at offset {result.queue_offset} ({result.status.value}).")


async def topic_delete(console: Console, request: Request) -> StarletteResponse:
    topic = request.path_params["topic"]
    quoted = urllib.parse.quote(topic, safe="")
    if request.method == "GET" or parse_form(await request.body()).get("confirm") != "yes":
        return console.page(
            "confirm", request, title=f"Delete {topic}", heading=f"Delete topic {topic}?",
            warning=f"This deletes {topic} from every master broker and every name server: its "
                    "queues and the consumer offsets of every group go. Stored messages age out "
                    "with their commit-log segments. This cannot be undone.",
            action=f"/topics/{quoted}/delete", fields={}, button=f"Delete {topic}",
            cancel=f"/topics/{quoted}")
    brokers = await console.admin.delete_topic(topic)
    return _redirect("/topics", f"Topic {topic} deleted from {len(brokers)} broker(s).")


# ---------------------------------------------------------------------- a topic's messages

#: Messages on one page of a topic's time-range listing.
PAGE_SIZE = 20


def _moment(text: str, default_ms: int, *, end: bool = False) -> int:
    """A ``datetime-local`` form value (local time) as epoch ms; ``default_ms`` if empty.
    An ``end`` given to the second or minute takes in all of that second or minute."""
    if not text:
        return default_ms
    moment = datetime.datetime.fromisoformat(text)
    ms = int(moment.timestamp() * 1000)
    if end and "." not in text:
        ms += 999 if text.count(":") == 2 else 59_999
    return ms


def _local(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(timespec="seconds")


async def topic_messages_page(console: Console, request: Request) -> StarletteResponse:
    """The messages of a topic stored between two times, ``PAGE_SIZE`` a page, queue by
    queue in offset order (a page reads only its own messages); for each, whether each
    group consuming the topic has committed past it."""
    admin = console.admin
    topic = request.path_params["topic"]
    q = request.query_params
    now = int(time.time() * 1000)
    try:
        begin = _moment(q.get("begin", ""), now - 3600_000)
        end = _moment(q.get("end", ""), now, end=True)
        page = int(q.get("page", "1"))
        if page < 1 or end < begin:
            raise ValueError
    except ValueError:
        return console.page("error", request, 400, title=f"Messages of {topic}",
                            error="give a begin time before the end time, and a page from 1")
    holders = await _holders(admin, topic)
    if not holders:
        return console.page("error", request, 404, title=f"Messages of {topic}",
                            error=f"no broker has a topic named {topic!r}")
    stats, groups = await asyncio.gather(
        monitor.topic_stats(admin, topic, addresses=holders),
        monitor.topic_consumers(admin, topic, holders))
    queues = [MessageQueue(topic, qs.broker_name, qs.queue_id) for qs in stats.queues]
    ranges = await _gather_all([message_scan.queue_range(admin, mq, begin, end)
                                for mq in queues])
    total = sum(hi - lo for lo, hi in ranges)
    skip, want = (page - 1) * PAGE_SIZE, PAGE_SIZE
    slices: list[tuple[MessageQueue, int, int]] = []
    for mq, (lo, hi) in zip(queues, ranges, strict=True):
        if want <= 0:
            break
        if skip >= hi - lo:
            skip -= hi - lo
            continue
        start = lo + skip
        stop = min(hi, start + want)
        slices.append((mq, start, stop))
        want -= stop - start
        skip = 0
    found = await _gather_all([_read_slice(admin, mq, a, b) for mq, a, b in slices])
    committed: dict[tuple[str, str, int], int] = {}
    for group, st in zip(groups, await _bounded(
            monitor.consume_stats(admin, g, topic, addresses=holders) for g in groups),
            strict=True):
        if isinstance(st, ConsumeStats):
            for ql in st.queues:
                committed[(group, ql.broker_name, ql.queue_id)] = ql.consumer_offset
    rows = [{"msg": m, "broker_name": mq.broker_name,
             "consumed": [committed.get((g, mq.broker_name, mq.queue_id), 0) > m.queue_offset
                          for g in groups]}
            for (mq, _a, _b), msgs in zip(slices, found, strict=True) for m in msgs]
    pages = max(1, -(-total // PAGE_SIZE))
    return console.page("topic-messages", request, title=f"Messages of {topic}", topic=topic,
                        rows=rows, groups=groups, total=total, page=page, pages=pages,
                        begin=_local(begin), end=_local(end))


async def _gather_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    results = await _bounded(calls)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return [r for r in results if not isinstance(r, BaseException)]


async def _read_slice(admin: AdminClient, mq: MessageQueue, start: int, stop: int
                      ) -> list[MessageExt]:
    out: list[MessageExt] = []
    async for batch in message_scan.scan_queue(admin, mq, start, stop):
        out.extend(batch)
    return out


# ---------------------------------------------------------------------- groups


async def groups_page(console: Console, request: Request) -> StarletteResponse:
    """Every group with a subscription-group config or stored offsets on some master:
    a Spark query's group has only the latter. Sorted by name, only the page's rows are
    asked for their figures; by a figure, every matching group is (:mod:`.group_list`)."""
    admin = console.admin
    masters, configs, committed, unread = await read_groups(admin)
    params = request.query_params
    sort = sort_of(params)
    names = sorted(set(configs) | set(committed))
    keep = [("sort", sort)] if sort != "name" else []
    if sort == "name":
        by_name = page_of(names, params, str, keep=keep)
        rows = await group_rows(admin, by_name.rows, configs, committed)
        listing: Page[Any] = by_name
    else:
        every = await group_rows(admin, matching(names, params, str), configs, committed)
        listing = dataclasses.replace(
            page_of(sorted(every, key=sort_key(sort)), params, lambda r: str(r["name"]),
                    keep=keep), listed=len(names))
        rows = listing.rows
    return console.page("groups", request, title="Consumer groups", groups=rows,
                        listing=listing, fields=GROUP_FIELDS, new_group=NEW_GROUP, sort=sort,
                        no_brokers=not masters, unread=sorted(unread.items()))


async def _spark_hint(admin: AdminClient, group: str) -> bool:
    configs, consumers = await asyncio.gather(monitor.subscription_groups(admin),
                                              monitor.consumer_connections(admin, group))
    return spark_group(group, group in configs, len(consumers))


def _sample_lag(console: Console, stats: ConsumeStats, now: int) -> list[Any]:
    """Keep the group's lag in its history, unless a broker did not answer (the lag of
    the queues it holds is missing: the sum would dip on the chart); the history."""
    key = f"lag:{stats.group}"
    scope = current_deadline()
    if scope is None or not scope.unanswered:
        console.history.add(key, now, stats.lag)
    return console.history.get(key)


def _lag_json(console: Console, stats: ConsumeStats) -> dict[str, Any]:
    now = int(time.time() * 1000)
    history = _sample_lag(console, stats, now)
    scope = current_deadline()
    return {
        "group": stats.group, "ts": now, "lag": stats.lag, "consumeTps": stats.consume_tps,
        "unanswered": sorted(scope.unanswered) if scope is not None else [],
        "history": history,
        "queues": [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id,
                    "brokerOffset": q.broker_offset, "consumerOffset": q.consumer_offset,
                    "lag": q.lag, "lastConsumed": when(q.last_timestamp)} for q in stats.queues],
    }


async def group_page(console: Console, request: Request) -> StarletteResponse:
    group = request.path_params["group"]
    admin = console.admin
    stats, connections, configs, dead = await asyncio.gather(
        monitor.consume_stats(admin, group), _connections(admin, group),
        monitor.subscription_groups(admin), _dead_letters(admin, group))
    consumers = connections.clients
    if not stats.queues and not consumers and group not in configs:
        return console.page("error", request, 404, title=f"Group {group}",
                            error=f"no broker knows a consumer group named {group!r}: none "
                                  "has its configuration, an offset it committed or a "
                                  "consumer of it online")
    consumers = [{**c, "version_name": version_name(c.get("version"))} for c in consumers]
    history = _sample_lag(console, stats, int(time.time() * 1000))
    return console.page("group", request, title=f"Group {group}", group=group, stats=stats,
                        consumers=consumers, history=history, connections=connections,
                        config=configs.get(group), fields=GROUP_FIELDS, new_group=NEW_GROUP,
                        dead_letters=dead, dlq_topic=DLQ_PREFIX + group,
                        reset_topics=sorted(stats.topics,
                                            key=lambda t: (t.startswith("%RETRY%"), t)),
                        spark=spark_group(group, group in configs, len(consumers)),
                        api_url=f"/api/groups/{urllib.parse.quote(group, safe='')}/lag")


async def _dead_letters(admin: AdminClient, group: str) -> int | None:
    """Messages stored in the group's dead-letter topic on the masters that have it
    (``None``: none has it)."""
    stats = await dlq_admin.dlq_stats(admin, group)
    return stats.messages if stats.queues else None


async def _connections(admin: AdminClient, group: str) -> group_admin.Connections:
    """The group's consumers online, with their subscriptions (none online: empty)."""
    try:
        return await group_admin.consumer_connection(admin, group)
    except BrokerResponseError as exc:
        if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
            raise
        return group_admin.Connections([])


async def group_lag_api(console: Console, request: Request) -> StarletteResponse:
    stats = await monitor.consume_stats(console.admin, request.path_params["group"])
    return JSONResponse(_lag_json(console, stats), headers={"Cache-Control": "no-store"})


def _reset_timestamp(form: dict[str, str]) -> tuple[int, str]:
    """Epoch ms for INVOKE_BROKER_TO_RESET_OFFSET, and words for it; a ValueError saying
    what does not read."""
    to = form.get("to", "earliest")
    if to == "latest":
        return -1, "the latest offset"
    if to == "earliest":
        return 0, "the earliest offset"
    if to != "time":
        raise ValueError(f"reset to earliest, latest or a time, not {to!r}")
    text = form.get("time", "")
    if not text:
        raise ValueError("give the point in time to reset to")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"the time {text!r} does not read as a date and time") from None
    return int(moment.timestamp() * 1000), f"the first message stored at or after {moment}"


async def group_reset(console: Console, request: Request) -> StarletteResponse:
    group = request.path_params["group"]
    quoted = urllib.parse.quote(group, safe="")
    form = parse_form(await request.body())
    topic = form.get("topic", "")
    try:
        timestamp, words = _reset_timestamp(form)
    except ValueError as exc:
        return console.page("error", request, 400, title=f"Group {group}", error=str(exc))
    if form.get("confirm") != "yes":
        warning = (f"Every queue of {topic} is moved to {words} for group {group}, on every "
                   "master broker. Running consumers of the group are told to continue from "
                   "there: messages may be consumed again or skipped.")
        if await _spark_hint(console.admin, group):
            warning += " " + SPARK_RESET_WARNING
        return console.page(
            "confirm", request, title=f"Reset {group}", heading=f"Reset offsets of {group}?",
            warning=warning,
            action=f"/groups/{quoted}/reset", fields={k: v for k, v in form.items()
                                                      if k in ("topic", "to", "time")},
            button="Reset offsets", cancel=f"/groups/{quoted}")
    try:
        rows = await monitor.reset_offset(console.admin, group, topic, timestamp=timestamp,
                                          addresses=await _holders(console.admin, topic))
    except ResetNotSupportedError as exc:
        return console.page("error", request, 501, title=f"Group {group}",
                            error=f"Offsets were not reset: {exc}.")
    return _redirect(f"/groups/{quoted}",
                     f"Offsets of {group} on {topic} reset to {words} ({len(rows)} queues).")


# ---------------------------------------------------------------------- messages


async def messages_page(console: Console, request: Request) -> StarletteResponse:
    q = dict(request.query_params)
    by = q.get("by")
    admin = console.admin
    results: Sequence[MessageExt] = []
    try:
        if by == "key":
            results = await admin.query_messages_by_key(q["topic"], q["key"])
        elif by == "id":
            results = [await admin.view_message(q["msg_id"], q.get("topic") or None)]
        elif by == "offset":
            queue = MessageQueue(q["topic"], q["broker"], int(q["queue_id"]))
            results = [await admin.message_at(queue, int(q["offset"]))]
    except (KeyError, ValueError) as exc:
        return console.page("messages", request, 400, title="Messages", q=q, searched=False,
                            error=f"incomplete search: {exc}")
    except (ConnectionLost, RequestTimeout):
        raise  # the cluster did not answer: an error page, not an empty search
    except TideMQError as exc:
        return console.page("messages", request, title="Messages", q=q, searched=False,
                            results=[], error=str(exc))
    names = {b.address: b.broker_name for b in await admin.cluster_list()} if results else {}
    shown = [_message_view(m, names) for m in results]
    online: dict[tuple[str, ...], list[tuple[str, str]]] = {}  # asked once per page
    for view in shown[:PAGE_SIZE]:
        view["consumption"] = await _consumption(admin, view["topic"], view["broker_name"],
                                                 view["queue_id"], view["queue_offset"])
        owner = owner_group(view["topic"])  # a dead letter goes back to its own group
        groups = tuple(sorted({g for g, _ in view["consumption"] or ()}
                              | ({owner} if owner else set())))
        if groups not in online:
            online[groups] = await _online_consumers(admin, groups)
        view["consumers"] = online[groups]
    for view in shown[:TRACED]:
        view["trace"] = await _trace(admin, view["uniq_key"] or view["msg_id"])
    return console.page("messages", request, title="Messages", q=q, searched=by is not None,
                        results=shown)


#: The messages of a search whose trace the page shows (one key query each).
TRACED = 5


async def _trace(admin: AdminClient, msg_id: str) -> MessageTrace | None:
    """The message's trace (sends and deliveries its clients recorded in the trace topic,
    :mod:`tidemq.client.trace_view`); ``None`` when the trace topic cannot be read."""
    try:
        return await query_trace(admin, msg_id)
    except TideMQError as exc:  # no trace topic: nobody enabled trace, or it is unreachable
        log.info("trace of %s: %s", msg_id, exc)
        return None


async def _online_consumers(admin: AdminClient, groups: Sequence[str]
                            ) -> list[tuple[str, str]]:
    """(group, client id) of every consumer of ``groups`` online now: who the "resend to
    consumer" form offers (a pull consumer among them answers that it cannot)."""
    found = await _bounded(monitor.consumer_connections(admin, g) for g in groups)
    out: list[tuple[str, str]] = []
    for group, rows in zip(groups, found, strict=True):
        if isinstance(rows, BaseException):
            log.info("consumers of %s: %s", group, rows)
            continue
        out.extend((group, str(row.get("clientId"))) for row in rows)
    return sorted(out)


async def message_resend(console: Console, request: Request) -> StarletteResponse:
    """CONSUME_MESSAGE_DIRECTLY: the chosen consumer consumes the message now, whatever
    its group's offsets say; back to the message with what its listener answered."""
    form = parse_form(await request.body())
    msg_id, topic = form.get("msg_id", ""), form.get("topic", "")
    group, _, client_id = form.get("target", "").partition(" ")  # group names hold no blank
    back = "/messages?" + urllib.parse.urlencode({"by": "id", "msg_id": msg_id,
                                                  "topic": topic})
    if not msg_id or not group or not client_id:
        return console.page("error", request, 400, title="Messages",
                            error="choose a consumer to resend the message to")
    try:
        result = await group_admin.consume_message_directly(
            console.admin, group, client_id, topic or None, msg_id)
    except TideMQError as exc:
        return _redirect(back, f"Not resent to {client_id} of {group}: {exc}")
    said = f"{client_id} of {group} consumed it: {result.consume_result or 'no answer'}"
    if result.remark:
        said += f" ({result.remark})"
    return _redirect(back, f"{said}, in {result.spent_time_mills} ms.")


async def _consumption(admin: AdminClient, topic: str, broker_name: str, queue_id: int,
                       offset: int) -> list[tuple[str, bool]] | None:
    """(group, consumed) for every group consuming ``topic``: consumed when the group has
    committed an offset past ``offset`` on that queue. None when it cannot be told."""
    try:
        holders = await _holders(admin, topic)
        groups = await monitor.topic_consumers(admin, topic, holders) if holders else []
        stats = await _bounded(monitor.consume_stats(admin, g, topic, addresses=holders)
                               for g in groups)
    except TideMQError as exc:
        log.info("consumption of %s@%s/%s: %s", topic, broker_name, queue_id, exc)
        return None
    out = []
    for group, st in zip(groups, stats, strict=True):
        if isinstance(st, ConsumeStats):
            committed = next((q.consumer_offset for q in st.queues
                              if q.broker_name == broker_name and q.queue_id == queue_id), 0)
            out.append((group, committed > offset))
    return out


def _message_view(msg: MessageExt, broker_names: dict[str, str]) -> dict[str, Any]:
    view = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    view.update(tags=msg.tags, msg_keys=msg.keys, uniq_key=msg.uniq_key,
                preview=body_preview(msg.body),
                broker_name=msg.broker_name or broker_names.get(msg.store_host, ""),
                consumption=None)
    return view


# ---------------------------------------------------------------------- logical queues


async def logical_page(console: Console, request: Request) -> StarletteResponse:
    """Every topic with logical queues (its brokers' configs carry ``logical.queues``),
    with its mapping as RIP-21 draws it: brokerName | MessageQueue | LogicalQueue(range)
    | QueueStatus, one row per segment."""
    admin = console.admin
    masters, wrappers = await _configs(admin)
    topics = sorted({t for w in wrappers.values() for t, tc in w.topic_config_table.items()
                     if LOGICAL_ATTRIBUTE in tc.attributes})
    lqa = LogicalQueueAdmin(admin)
    mappings = await _bounded(lqa.query(t, repair=False) for t in topics)  # a GET never writes
    tables = []
    for topic, mapping in zip(topics, mappings, strict=True):
        if isinstance(mapping, BaseException):
            tables.append({"topic": topic, "error": str(mapping), "rows": []})
        else:
            tables.append({"topic": topic, "epoch": mapping.epoch, "total": mapping.total,
                           "rows": mapping.table()})
    return console.page("logical", request, title="Logical queues", tables=tables,
                        brokers=sorted(masters), broker_count=len(masters))


async def logical_submit(console: Console, request: Request) -> StarletteResponse:
    form = parse_form(await request.body())
    topic = form.get("topic", "")
    lqa = LogicalQueueAdmin(console.admin)
    try:
        if form.get("action") == "migrate":
            lq, target = int(form.get("lq", "")), form.get("target", "")
            mapping = await lqa.migrate(topic, lq, target)
            leader = mapping.leader(lq)
            msg = (f"Logical queue {lq} of {topic} now writes to "
                   f"{leader.broker if leader else target} (epoch {mapping.epoch}).")
        else:
            total = int(form.get("queues", ""))
            mapping = await lqa.create(topic, total)
            msg = (f"Logical topic {topic} created: {mapping.total} logical queues on "
                   f"{', '.join(sorted(mapping.brokers()))}.")
    except ValueError as exc:
        return console.page("error", request, 400, title="Logical queues",
                            error=f"bad form: {exc}")
    return _redirect("/logical-queues", msg)


# ---------------------------------------------------------------------- wiring


def _guard(console: Console, handler: Callable[[Console, Request], Awaitable[StarletteResponse]],
           *, needs_admin: bool = True) -> Handler:
    """Find the visitor (or send them to log in); refuse a state-changing request without
    the session's CSRF token, from another site, or (``needs_admin``) by a viewer; turn
    a cluster error into an error page. A page's requests (a GET's) share one deadline
    (``consolePageDeadline``, :mod:`tidemq.client.request_deadline`): a broker that has
    not answered by then is named on the page, not waited for again."""

    @functools.wraps(handler)
    async def run(request: Request) -> StarletteResponse:
        visitor = console.auth.visitor(request)
        if visitor is None:
            return _login_needed(request)
        request.state.visitor = visitor
        names = asyncio.create_task(console.broker_names.refresh())
        # A page that reads waits for the brokers under one deadline; a change (a form
        # posted) keeps its requests' own timeouts: a consumer given a message directly
        # has seconds to consume it, and a change is all or nothing.
        deadline = (request_deadline(console.config.page_deadline)
                    if request.method in SAFE_METHODS else contextlib.nullcontext())
        try:
            with deadline:
                response = await _checked(console, handler, request, visitor, needs_admin)
        finally:
            await names
        if visitor.new:
            set_session_cookie(response, request, visitor.session)
        return response

    return run


def _login_needed(request: Request) -> StarletteResponse:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": "log in first"}, status_code=401)
    if request.method not in SAFE_METHODS:
        return PlainTextResponse("log in first (the session ended)", status_code=401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse("/login?" + urllib.parse.urlencode({"next": target}),
                            status_code=303)


async def _checked(console: Console,
                   handler: Callable[[Console, Request], Awaitable[StarletteResponse]],
                   request: Request, visitor: Visitor, needs_admin: bool) -> StarletteResponse:
    if request.method not in SAFE_METHODS:
        too_big = oversized_form(request)
        if too_big is not None:
            return too_big
        form = parse_form(await request.body())
        refusal = console.auth.refuse_change(request, visitor, form, needs_admin=needs_admin)
        if refusal is not None:
            console.metrics.refused.labels(refusal.kind).inc()
            console.logs.refusal.info("%s %s refused for %s: %s", request.method,
                                      request.url.path, visitor.user.name, refusal.message)
            return console.page("error", request, 403, title="Refused", error=refusal.message)
    try:
        return await handler(console, request)
    except TideMQError as exc:
        log.info("%s %s: %s", request.method, request.url.path, exc)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=502)
        return console.page("error", request, 502, title="The cluster answered with an error",
                            error=str(exc))


async def _health(request: Request) -> StarletteResponse:
    return PlainTextResponse("ok")


def create_app(console: Console, bind: str = "127.0.0.1") -> Starlette:
    """The application for ``console``, answering the names of the Host allow-list for a
    console bound to ``bind``."""
    g = functools.partial(_guard, console)
    plain = functools.partial(_plain, console)
    routes = [
        Route("/", lambda r: _redirect("/cluster")),
        Route("/healthz", _health),
        Route("/login", plain(login_page), methods=["GET"]),
        Route("/login", plain(login_submit), methods=["POST"]),
        Route("/logout", _guard(console, logout, needs_admin=False), methods=["POST"]),
        Route("/metrics", plain(metrics_page), methods=["GET"]),
        Route("/cluster", g(cluster_page)),
        Route("/brokers/{addr}", g(broker_page)),
        Route("/brokers/{addr}/config", g(broker_config_page), methods=["GET"]),
        Route("/brokers/{addr}/config", g(broker_config_submit), methods=["POST"]),
        Route("/lmq", g(lmq_page)),
        Route("/topics", g(topics_page), methods=["GET"]),
        Route("/topics", g(topic_submit), methods=["POST"]),
        Route("/topics/{topic}", g(topic_page)),
        Route("/topics/{topic}/send", g(topic_send), methods=["POST"]),
        Route("/topics/{topic}/messages", g(topic_messages_page)),
        Route("/topics/{topic}/delete", g(topic_delete), methods=["GET", "POST"]),
        Route("/groups", g(groups_page), methods=["GET"]),
        Route("/groups", g(group_submit), methods=["POST"]),
        Route("/groups/{group}/delete", g(group_delete), methods=["GET", "POST"]),
        Route("/groups/{group}/clients/{client_id}", g(consumer_page), methods=["GET"]),
        Route("/groups/{group}", g(group_page)),
        Route("/groups/{group}/reset", g(group_reset), methods=["POST"]),
        Route("/api/groups/{group}/lag", g(group_lag_api)),
        Route("/api/topics/{topic}/rates", g(topic_rates_api)),
        Route("/dlq", g(dlq_list), methods=["GET"]),
        Route("/dlq/{group}", g(dlq_page), methods=["GET"]),
        Route("/dlq/{group}/export", g(dlq_export), methods=["GET"]),
        Route("/dlq/{group}/resend", g(dlq_resend), methods=["POST"]),
        Route("/dlq/{group}/resends/{job}", g(dlq_job_page), methods=["GET"]),
        Route("/api/dlq/{group}/resends/{job}", g(dlq_job_api), methods=["GET"]),
        Route("/messages", g(messages_page)),
        Route("/messages/resend", g(message_resend), methods=["POST"]),
        Route("/logical-queues", g(logical_page), methods=["GET"]),
        Route("/logical-queues", g(logical_submit), methods=["POST"]),
    ]
    hosts = HostAllowList(bind, console.config.host_names)
    refused = console.metrics.refused
    return Starlette(routes=routes, middleware=[
        Middleware(HostGate, hosts=hosts, refused=lambda reason: refused.labels(reason).inc())])


def _plain(console: Console, handler: Callable[[Console, Request], Awaitable[StarletteResponse]]
           ) -> Handler:
    @functools.wraps(handler)
    async def run(request: Request) -> StarletteResponse:
        return await handler(console, request)

    return run

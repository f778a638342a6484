"""A synchronous client for scripts and Spark executors: no event loop, plain sockets.

Built on :class:`tidemq.net.BlockingClient` and the same plain code as the asyncio
client -- routes and what the cache decides (:mod:`~tidemq.client.topic_route`,
:mod:`~tidemq.client.route_table`), message preparation, queue choice, send attempts and
results (:mod:`~tidemq.client.sending`, :mod:`~tidemq.client.selector`,
:mod:`~tidemq.client.send_attempts`), pulls (:mod:`~tidemq.client.pull`) and offsets
(:mod:`~tidemq.client.offsets`) -- so both behave alike; only the waiting differs.

* :class:`BlockingRouteCache` -- routes from any live name server, cached for
  ``poll_name_server_interval``;
* :class:`BlockingProducer` -- ``send`` / ``send_batch`` with the async producer's retries;
* :class:`BlockingPullConsumer` -- stateless reads: ``pull(queue, offset, max_nums)``
  returns ``(status, next_offset, min_offset, max_offset, messages)``, ``pull_batch``
  the same with the messages as columns; the caller keeps the offsets (a Spark
  partition knows its range). No heartbeat is sent. ``pull_body`` leaves the records
  undecoded for callers with their own decoder (:mod:`tidemq.client.records`);
* :class:`BlockingLmqPullConsumer` -- the same reads of light message queues (RIP-28),
  which no route names, from one given broker.

Every object is safe to share between threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from tidemq.client import offsets as ofs
from tidemq.client.config import ClientConfig
from tidemq.client.errors import NoRouteError
from tidemq.client.pull import (
    PullBatch,
    PulledBody,
    PullResult,
    pull_request,
    read_pull_batch,
    read_pull_body,
    read_pull_response,
)
from tidemq.client.queue_types import (
    QueueType,
    QueueTypeCache,
    read_queue_type,
    topic_config_request,
)
from tidemq.client.route_table import NEXT_SERVER, RouteCacheCore
from tidemq.client.selector import QueueSelector, RoundRobin, SendPlan
from tidemq.client.send_attempts import SendAttempts
from tidemq.client.sending import (
    BatchCompression,
    build_send,
    prepare_message,
    prepare_send_batch,
    read_send_response,
    send_options,
)
from tidemq.client.stamps import new_uniq_keys, now_ms
from tidemq.client.subscription import SUB_ALL, Subscription
from tidemq.client.suggestions import PullSuggestions
from tidemq.client.topic_route import (
    MASTER_ID,
    TopicRoute,
    read_route_response,
    route_request,
)
from tidemq.client.validation import validate_group
from tidemq.codec.batch_protocol import decode_batch_response, encode_batch_request
from tidemq.codec.bodies import TopicList, TopicRouteData, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ConnectionLost, ResponseCode, TideMQError
from tidemq.formats.properties import PropertyKey
from tidemq.net.blocking import BlockingClient
from tidemq.types import Message, MessageQueue, SendResult

__all__ = ["BlockingLmqPullConsumer", "BlockingProducer", "BlockingPullConsumer",
           "BlockingRouteCache"]

log = logging.getLogger(__name__)


class BlockingRouteCache(RouteCacheCore[BlockingClient]):
    """Routes by topic over a :class:`BlockingClient`; see the module docstring. Its
    options and decisions are :mod:`tidemq.client.route_table`'s, as for the asyncio
    cache; a lookup fetches a route older than ``ttl`` (default 30 s) again."""

    default_ttl = 30.0

    def get(self, topic: str, *, allow_default: bool = False,
            refresh: bool = False) -> TopicRoute:
        """The cached route of ``topic`` if younger than ``ttl``, else a fresh one (see
        :meth:`tidemq.client.routes.RouteCache.get` for ``allow_default``)."""
        found = self._lookup(topic, allow_default, refresh)
        if found.route is not None:
            return found.route
        fetch = self._route_fetch(topic, allow_default)
        route = None
        try:
            while route is None:
                route = fetch.answer(*self.request_any(fetch.request))
        except NEXT_SERVER as exc:
            return self._table.kept(topic, exc, found.fallback)
        if route is not fetch.known:  # a route kept whole was not fetched afresh
            self.store(topic, route)
        return route

    def mark_stale(self, topic: str) -> None:
        """Fetch ``topic`` again on its next use (after a send to it failed)."""
        self._table.mark_stale(topic)

    def fetch(self, topic: str) -> TopicRouteData:
        response, addr = self.request_any(lambda: route_request(topic))
        return read_route_response(response, address=addr)

    def topic_list(self) -> list[str]:
        """Every topic the name servers know, sorted."""
        response, addr = self.request_any(
            lambda: RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        ofs.check_success(response, address=addr)
        return sorted(decode_body(response.full_body(), TopicList).topic_list)

    def request_any(self, build: Callable[[], RemotingCommand]) -> tuple[RemotingCommand, str]:
        """Send ``build()`` to the name servers in turn until one answers."""
        last: TideMQError | None = None
        for addr in self._ring.order():
            try:
                response = self._client.request(addr, build(), self.timeout)
            except NEXT_SERVER as exc:
                last = self._ring.failed(addr, exc)
                continue
            self._ring.answered(addr)
            return response, addr
        raise self._ring.exhausted(last)

    def master_address(self, queue: MessageQueue, *, allow_default: bool = False) -> str:
        """The master broker serving ``queue`` (refetching the route once if unknown);
        ``allow_default`` as for :meth:`get`."""
        for refresh in (False, True):
            route = self.get(queue.topic, allow_default=allow_default, refresh=refresh)
            addr = route.master_address(queue.broker_name)
            if addr is not None:
                return addr
        raise NoRouteError(queue.topic, f"broker {queue.broker_name!r} has no master",
                           queue=queue)

    def read_address(self, queue: MessageQueue, broker_id: int = MASTER_ID, *,
                     refresh: bool = False) -> str:
        """The member of ``queue``'s broker group to read from: ``broker_id`` if listed,
        else the master, else a replica (:func:`~tidemq.client.topic_route.read_member`);
        ``refresh`` asks the name servers first."""
        for again in (refresh, True):
            route = self.get(queue.topic, refresh=again)
            addr = route.read_address(queue.broker_name, broker_id)
            if addr is not None:
                return addr
        raise NoRouteError(queue.topic, f"broker {queue.broker_name!r} has no member",
                           queue=queue)


class _BlockingBase:
    """A blocking client, its route cache, and ``with``/``close``."""

    def __init__(self, namesrv: str | Sequence[str] | None,
                 config: ClientConfig | None) -> None:
        self.config = ClientConfig.for_namesrv(namesrv, config)
        cfg = self.config
        self.client = BlockingClient(request_timeout=cfg.request_timeout,
                                     connect_timeout=cfg.request_timeout,
                                     credentials=cfg.credentials, tls=cfg.tls)
        self.routes = BlockingRouteCache(
            self.client, cfg.namesrv_addr, timeout=cfg.request_timeout,
            ttl=cfg.poll_name_server_interval, default_topic=cfg.default_topic,
            default_queue_nums=cfg.default_topic_queue_nums,
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> _BlockingBase:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _request(self, queue: MessageQueue, cmd: RemotingCommand,
                 timeout: float | None = None) -> tuple[RemotingCommand, str]:
        addr = self.routes.master_address(queue)
        return self.client.request(addr, cmd, timeout), addr


class BlockingProducer(_BlockingBase):
    """Synchronous sends for one producer group (same rules as the async producer)."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 config: ClientConfig | None = None,
                 batch_compression: BatchCompression | None = None,
                 queue_types: Mapping[str, str | QueueType] | None = None) -> None:
        validate_group(group)
        super().__init__(namesrv, config)
        self.group = group
        self._opts = send_options(self.config, group)
        self._counter = RoundRobin()
        self._keys = new_uniq_keys(self.config.client_ip)
        self.batch_compression = batch_compression or BatchCompression()
        self.queue_types = QueueTypeCache()
        for topic, queue_type in (queue_types or {}).items():
            self.queue_types.hint(topic, queue_type)

    def __enter__(self) -> BlockingProducer:
        return self

    def send(self, msg: Message, *, queue: MessageQueue | None = None,
             sharding_key: str | None = None, selector: QueueSelector | None = None,
             timeout: float | None = None) -> SendResult:
        """See :meth:`tidemq.client.producer.Producer.send`."""
        born = now_ms()
        prepared = prepare_message(msg, max_size=self.config.max_message_size,
                                   keys=self._keys, now_ms=born, sharding_key=sharding_key)
        plan = self._plan(prepared, queue, sharding_key, selector)
        uniq = prepared.properties[PropertyKey.UNIQ_KEY]

        def build(_route: TopicRoute, mq: MessageQueue, _addr: str) -> tuple[RemotingCommand,
                                                                              str]:
            return build_send(prepared, self._opts, mq, now_ms=born, keys=self._keys), uniq

        return self._deliver(prepared.topic, plan, build, timeout)

    def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                   sharding_key: str | None = None, selector: QueueSelector | None = None,
                   timeout: float | None = None, queue_type: str | QueueType | None = None,
                   compression: BatchCompression | None = None) -> SendResult:
        """See :meth:`tidemq.client.producer.Producer.send_batch` (inner batches to BatchCQ
        topics, outer batches to others)."""
        born = now_ms()
        prepared = prepare_send_batch(msgs, max_size=self.config.max_message_size,
                                      keys=self._keys, now_ms=born,
                                      compression=compression or self.batch_compression)
        plan = self._plan(msgs[0], queue, sharding_key, selector)
        fixed = QueueType.parse(queue_type) if queue_type is not None else None

        def build(route: TopicRoute, mq: MessageQueue, addr: str) -> tuple[RemotingCommand,
                                                                            str]:
            kind = fixed or self._queue_type(route, mq, addr)
            return prepared.request(self._opts, mq, kind, now_ms=born), prepared.msg_id(kind)

        return self._deliver(prepared.topic, plan, build, timeout, prepared.count)

    def _queue_type(self, route: TopicRoute, mq: MessageQueue, addr: str) -> QueueType:
        """The queue type of ``mq``'s topic on its broker (asked once per route)."""
        hit = self.queue_types.cached(mq.topic, mq.broker_name, route)
        if hit is None:
            response = self.client.request(addr, topic_config_request(mq.topic))
            hit = read_queue_type(response, mq.topic, address=addr)
            self.queue_types.store(mq.topic, mq.broker_name, route, hit)
        return hit

    def _plan(self, msg: Message, queue: MessageQueue | None, sharding_key: str | None,
              selector: QueueSelector | None) -> SendPlan:
        return SendPlan(msg, attempts=1 + self.config.retry_times_when_send_failed,
                        counter=self._counter, queue=queue, sharding_key=sharding_key,
                        selector=selector)

    def _deliver(self, topic: str, plan: SendPlan,
                 build: Callable[[TopicRoute, MessageQueue, str], tuple[RemotingCommand, str]],
                 timeout: float | None, count: int = 1) -> SendResult:
        budget = self.config.send_msg_timeout if timeout is None else timeout
        attempts = SendAttempts(plan, self.routes.get(topic, allow_default=True),
                                budget=budget, now=time.monotonic())
        while (mq := attempts.next(time.monotonic())) is not None:
            addr = ""
            try:
                addr = attempts.address(mq) or self.routes.master_address(
                    mq, allow_default=True)
                cmd, msg_id = build(attempts.route, mq, addr)
                response = self.client.request(addr, cmd, attempts.wait(time.monotonic()))
                return read_send_response(response, mq, address=addr, msg_id=msg_id,
                                          count=count)
            except TideMQError as exc:
                if not attempts.failed(mq, addr, exc):
                    if attempts.route_outdated:
                        self.routes.mark_stale(topic)
                    raise
            attempts.rerouted(self._refreshed(topic))
        if attempts.route_outdated:
            self.routes.mark_stale(topic)
        raise attempts.exhausted()

    def _refreshed(self, topic: str) -> TopicRoute | TideMQError:
        """The route fetched again after a failure, or why it could not be."""
        try:
            return self.routes.get(topic, allow_default=True, refresh=True)
        except TideMQError as exc:
            return exc


class BlockingPullConsumer(_BlockingBase):
    """Stateless synchronous reads for one consumer group; see the module docstring."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 config: ClientConfig | None = None) -> None:
        validate_group(group)
        super().__init__(namesrv, config)
        self.group = group
        #: The member each queue is pulled from next, as the brokers suggest.
        self.suggestions = PullSuggestions()

    def __enter__(self) -> BlockingPullConsumer:
        return self

    def _request(self, queue: MessageQueue, cmd: RemotingCommand,
                 timeout: float | None = None) -> tuple[RemotingCommand, str]:
        """``cmd`` to the group's master, or to a replica while the master is down."""
        return self._member(queue, cmd, MASTER_ID, timeout)

    def _pull_request(self, queue: MessageQueue, cmd: RemotingCommand,
                      timeout: float | None) -> tuple[RemotingCommand, str]:
        """A pull, to the member the last answer for ``queue`` suggested."""
        response, addr = self._member(queue, cmd, self.suggestions.broker_id(queue), timeout)
        self.suggestions.note(queue, response)
        return response, addr

    def _member(self, queue: MessageQueue, cmd: RemotingCommand, broker_id: int,
                timeout: float | None) -> tuple[RemotingCommand, str]:
        """``cmd`` to member ``broker_id`` of ``queue``'s group (as the asyncio client's
        :func:`~tidemq.client.member_request.member_request`): once more, to the member
        a fresh route names, when the connection is lost."""
        addr = self.routes.read_address(queue, broker_id)
        try:
            return self.client.request(addr, cmd, timeout), addr
        except ConnectionLost:
            self.suggestions.forget(queue)
            fresh = self.routes.read_address(queue, refresh=True)
            if fresh == addr:
                raise
            return self.client.request(fresh, cmd, timeout), fresh

    def queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic`` (fresh from the name server)."""
        return list(self.routes.get(topic, refresh=True).subscribe_queues)

    def pull(self, queue: MessageQueue, offset: int, max_nums: int = 32, *,
             expression: str = SUB_ALL, timeout: float | None = None) -> PullResult:
        """Up to ``max_nums`` messages of ``queue`` from ``offset``, without waiting for
        new ones: ``(status, next_offset, min_offset, max_offset, messages)``."""
        sub = Subscription.parse(queue.topic, expression)
        cmd = pull_request(self.group, queue, offset, max_nums=max_nums, subscription=sub)
        response, addr = self._pull_request(queue, cmd, timeout)
        return read_pull_response(response, queue, sub, address=addr, offset=offset)

    def pull_batch(self, queue: MessageQueue, offset: int, max_nums: int = 32, *,
                   expression: str = SUB_ALL, timeout: float | None = None) -> PullBatch:
        """:meth:`pull` with the messages as columns
        (:class:`~tidemq.client.MessageBatch`, docs/client.md): ``(status, next_offset,
        min_offset, max_offset, batch)``, ``batch`` ``None`` when no message is left."""
        sub = Subscription.parse(queue.topic, expression)
        cmd = pull_request(self.group, queue, offset, max_nums=max_nums, subscription=sub)
        response, addr = self._pull_request(queue, cmd, timeout)
        return read_pull_batch(response, queue, sub, address=addr, offset=offset)

    def pull_body(self, queue: MessageQueue, offset: int, max_nums: int = 32, *,
                  expression: str = SUB_ALL, timeout: float | None = None) -> PulledBody:
        """:meth:`pull` with the records left undecoded: ``(status, next_offset,
        min_offset, max_offset, body)``. The broker filters tags by hash only; the caller
        decodes (:mod:`tidemq.client.records`) and filters the rest."""
        sub = Subscription.parse(queue.topic, expression)
        cmd = pull_request(self.group, queue, offset, max_nums=max_nums, subscription=sub)
        response, addr = self._pull_request(queue, cmd, timeout)
        return read_pull_body(response, address=addr)

    def get_min_offset(self, queue: MessageQueue) -> int:
        response, addr = self._request(queue, ofs.min_offset_request(queue))
        return ofs.read_offset(response, address=addr)

    def get_max_offset(self, queue: MessageQueue) -> int:
        response, addr = self._request(queue, ofs.max_offset_request(queue))
        return ofs.read_offset(response, address=addr)

    def search_offset(self, queue: MessageQueue, timestamp_ms: int, *,
                      upper: bool = False) -> int:
        """The offset of the first message stored at or after ``timestamp_ms``."""
        response, addr = self._request(queue, ofs.search_offset_request(
            queue, timestamp_ms, upper=upper))
        return ofs.read_offset(response, address=addr)

    def committed(self, queue: MessageQueue) -> int | None:
        """The group's stored offset for ``queue`` (``None`` if it has none)."""
        response, addr = self._request(queue, ofs.query_offset_request(self.group, queue))
        return ofs.read_committed(response, address=addr)

    def commit(self, queue: MessageQueue, offset: int) -> None:
        """Store ``offset`` as the group's offset for ``queue``."""
        response, addr = self._request(queue, ofs.update_offset_request(self.group, queue,
                                                                        offset))
        ofs.check_success(response, address=addr)

    def commit_all(self, offsets: Mapping[MessageQueue, int]) -> None:
        """:meth:`commit` of every queue of ``offsets``, in one request a broker (the
        batch protocol; a request a queue to a broker that does not speak it). A broker
        answers the commit of a group with no consumer online once its offsets file holds
        it, and the commits of one request are written together."""
        by_broker: dict[str, list[tuple[MessageQueue, int]]] = {}
        for queue, offset in offsets.items():
            by_broker.setdefault(queue.broker_name, []).append((queue, offset))
        for commits in by_broker.values():
            children = [ofs.update_offset_request(self.group, q, o) for q, o in commits]
            if len(children) > 1:
                parent = encode_batch_request(RequestCode.UPDATE_CONSUMER_OFFSET, children)
                response, addr = self._request(commits[0][0], parent)
                if response.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    ofs.check_success(response, address=addr)
                    for answer in decode_batch_response(response,
                                                        [c.opaque for c in children]):
                        ofs.check_success(answer, address=addr)
                    continue
            for queue, offset in commits:
                self.commit(queue, offset)


class BlockingLmqPullConsumer(BlockingPullConsumer):
    """:class:`BlockingPullConsumer` for light message queues (RIP-28): every request goes
    to ``broker`` (an ``ip:port``), since LMQs are registered in no route."""

    def __init__(self, group: str, broker: str, *, config: ClientConfig | None = None) -> None:
        super().__init__(group, None, config=ClientConfig.for_namesrv(broker, config))
        self.broker = broker

    def __enter__(self) -> BlockingLmqPullConsumer:
        return self

    def _request(self, queue: MessageQueue, cmd: RemotingCommand,
                 timeout: float | None = None) -> tuple[RemotingCommand, str]:
        return self.client.request(self.broker, cmd, timeout), self.broker

    def _pull_request(self, queue: MessageQueue, cmd: RemotingCommand,
                      timeout: float | None) -> tuple[RemotingCommand, str]:
        return self._request(queue, cmd, timeout)

    def pull(self, queue: MessageQueue, offset: int, max_nums: int = 32, *,
             expression: str = SUB_ALL, timeout: float | None = None) -> PullResult:
        # A record's queue offset is its parent queue's, not the LMQ's: never filter by it.
        sub = Subscription.parse(queue.topic, expression)
        cmd = pull_request(self.group, queue, offset, max_nums=max_nums, subscription=sub)
        response, addr = self._request(queue, cmd, timeout)
        return read_pull_response(response, queue, sub, address=addr, offset=None)

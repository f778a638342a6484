"""Which queue type a topic has on a broker: SimpleCQ or BatchCQ (docs/reference/store.md §3.1).

A producer sends a batch to a BatchCQ topic as one inner batch (one record, compressed
end to end) and to any other topic as an outer batch, so it must know the type before it
builds the request. The type is the topic attribute ``queue.type``, which only the
broker holds: it is asked with GET_TOPIC_CONFIG (351) and the answer is cached per
(topic, broker) *with the route it was asked under* -- when the route cache replaces a
topic's route (every ``poll_name_server_interval``, or after a failed send), the next
batch asks again. A topic the broker does not know yet (it will be auto-created from
``TBW102``) is SimpleCQ. Application hints (:meth:`QueueTypeCache.hint`) win over what
brokers say and are never asked about.

The request and the reading of its answer are plain functions, shared with the blocking
client.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable

from tidemq.codec.bodies import TopicConfig, TopicConfigSerializeWrapper, decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import GetTopicConfigRequestHeader
from tidemq.errors import RemoteProtocolError, ResponseCode, error_for_code

__all__ = ["QUEUE_TYPE", "QueueType", "QueueTypeCache", "read_queue_type",
           "topic_config_request"]

#: The topic attribute that names the queue type.
QUEUE_TYPE = "queue.type"


class QueueType(enum.Enum):
    SIMPLE = "SimpleCQ"
    BATCH = "BatchCQ"

    @classmethod
    def parse(cls, value: str | QueueType) -> QueueType:
        """``"BatchCQ"`` / ``"SimpleCQ"`` (any case) or a member."""
        if isinstance(value, QueueType):
            return value
        for member in cls:
            if member.value.lower() == value.strip().lower():
                return member
        raise ValueError(f"queue type must be SimpleCQ or BatchCQ, not {value!r}")


def topic_config_request(topic: str) -> RemotingCommand:
    """GET_TOPIC_CONFIG of ``topic``."""
    header = GetTopicConfigRequestHeader(topic=topic)
    return RemotingCommand.request(RequestCode.GET_TOPIC_CONFIG, header.to_ext())


def read_queue_type(response: RemotingCommand, topic: str, *, address: str) -> QueueType:
    """The queue type in a GET_TOPIC_CONFIG answer. The body is TideMQ's
    TopicConfigSerializeWrapper or Java's TopicConfigAndQueueMapping (a TopicConfig with
    extra members). SimpleCQ when the topic does not exist yet (auto-creation makes
    SimpleCQ topics) and when the broker cannot or may not tell (an outer batch is safe
    on any topic: a BatchCQ broker still stores it as one record)."""
    if response.code in _SIMPLE_CODES:
        return QueueType.SIMPLE
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(response.code, response.remark or "", address=address)
    body = response.full_body()
    wrapper = decode_body(body, TopicConfigSerializeWrapper)
    config = wrapper.topic_config_table.get(topic)
    if config is None:
        try:
            config = decode_body(body, TopicConfig)
        except RemoteProtocolError:
            return QueueType.SIMPLE
    value = config.attributes.get(QUEUE_TYPE, QueueType.SIMPLE.value)
    try:
        return QueueType.parse(value)
    except ValueError:
        return QueueType.SIMPLE


_SIMPLE_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                           ResponseCode.NO_PERMISSION})

_Request = Callable[[str, RemotingCommand], Awaitable[RemotingCommand]]


class QueueTypeCache:
    """Queue types by (topic, broker name), kept with the route they were learnt under."""

    def __init__(self, request: _Request | None = None) -> None:
        """``request(address, command)`` asks a broker (:meth:`get`); without it the cache
        is filled by its owner (:meth:`store`), as the blocking producer does."""
        self._request = request
        self._hints: dict[str, QueueType] = {}
        self._known: dict[tuple[str, str], tuple[object, QueueType]] = {}
        self._inflight: dict[tuple[str, str], asyncio.Future[QueueType]] = {}

    def hint(self, topic: str, queue_type: str | QueueType) -> None:
        """Take ``queue_type`` for ``topic`` on every broker without asking."""
        self._hints[topic] = QueueType.parse(queue_type)

    def cached(self, topic: str, broker_name: str, route: object) -> QueueType | None:
        """Decide without I/O: the hint, or the type learnt under ``route``."""
        hinted = self._hints.get(topic)
        if hinted is not None:
            return hinted
        known = self._known.get((topic, broker_name))
        if known is not None and known[0] is route:
            return known[1]
        return None

    def store(self, topic: str, broker_name: str, route: object, queue_type: QueueType) -> None:
        """Remember what ``broker_name`` said under ``route``."""
        self._known[(topic, broker_name)] = (route, queue_type)

    def forget(self, topic: str) -> None:
        """Ask the brokers again next time (not the hints)."""
        for key in [k for k in self._known if k[0] == topic]:
            del self._known[key]

    async def get(self, topic: str, broker_name: str, address: str,
                  route: object) -> QueueType:
        """The queue type of ``topic`` on ``broker_name`` at ``address``; ``route`` is the
        route object the caller works with (a new one makes the cache ask again)."""
        hit = self.cached(topic, broker_name, route)
        if hit is not None:
            return hit
        key = (topic, broker_name)
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._ask(topic, address))
            self._inflight[key] = fut
            fut.add_done_callback(lambda f: self._settled(key, route, f))
        return await asyncio.shield(fut)

    async def _ask(self, topic: str, address: str) -> QueueType:
        if self._request is None:
            raise RuntimeError("this QueueTypeCache has no request function; use store()")
        response = await self._request(address, topic_config_request(topic))
        return read_queue_type(response, topic, address=address)

    def _settled(self, key: tuple[str, str], route: object,
                 fut: asyncio.Future[QueueType]) -> None:
        if self._inflight.get(key) is fut:
            del self._inflight[key]
        if fut.cancelled() or fut.exception() is not None:
            return
        self.store(key[0], key[1], route, fut.result())

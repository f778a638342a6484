"""Building broker requests on the wire, without the client library.

Each builder returns a :class:`RemotingCommand` exactly as a Java or C++ client would put
it on the wire (remoting.md §2); :class:`Peer` sends them over one
:class:`~tidemq.net.RemotingClient` connection and decodes what comes back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from tidemq.broker.app import BrokerApp
from tidemq.broker.pipeline import Handler
from tidemq.codec.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    HeartbeatData,
    MessageModel,
    ProducerData,
    SubscriptionData,
    TopicRouteData,
    decode_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.formats.batch import encode_batch
from tidemq.formats.properties import encode_properties
from tidemq.net import RemotingClient
from tidemq.net.connection import Connection
from tidemq.types import MessageExt

PULL_COMMIT = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4

_counter = 0


def uniq_key() -> str:
    """A fresh 32-hex-char UNIQ_KEY (opaque to the broker)."""
    global _counter
    _counter += 1
    return f"{time.time_ns() & 0xFFFFFFFFFFFFFFFF:016X}{_counter:016X}"


def props(tags: str | None = None, keys: str | None = None, **extra: str) -> str:
    """A property string with a UNIQ_KEY, plus TAGS/KEYS when given."""
    values: dict[str, str] = {"UNIQ_KEY": uniq_key(), "WAIT": "true"}
    if tags is not None:
        values["TAGS"] = tags
    if keys is not None:
        values["KEYS"] = keys
    values.update(extra)
    return encode_properties(values).decode()


def _send_header(topic: str, *, queue_id: int, properties: str | None, group: str,
                 default_topic: str, queue_nums: int, sys_flag: int, flag: int,
                 batch: bool) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group=group, topic=topic, default_topic=default_topic,
        default_topic_queue_nums=queue_nums, queue_id=queue_id, sys_flag=sys_flag,
        born_timestamp=int(time.time() * 1000), flag=flag, properties=properties, batch=batch)


def send(topic: str, body: bytes = b"hello", *, code: int = RequestCode.SEND_MESSAGE_V2,
         queue_id: int = 0, properties: str | None = None, group: str = "pg",
         default_topic: str = "TBW102", queue_nums: int = 4, sys_flag: int = 0,
         flag: int = 0) -> RemotingCommand:
    """One message: code 10 with V1 keys, 310 with one-letter keys."""
    header = _send_header(topic, queue_id=queue_id,
                          properties=props() if properties is None else properties or None,
                          group=group, default_topic=default_topic, queue_nums=queue_nums,
                          sys_flag=sys_flag, flag=flag, batch=False)
    return _send_command(code, header, body)


def send_batch(topic: str, entries: Iterable[tuple[bytes, str]], *,
               code: int = RequestCode.SEND_BATCH_MESSAGE, queue_id: int = 0,
               batch_flag: str | None = None, group: str = "pg",
               default_topic: str = "TBW102", queue_nums: int = 4) -> RemotingCommand:
    """A §3.2 batch of ``(body, property string)`` entries; ``batch_flag`` overrides the
    header's batch value as text (the C++ client sends ``"1"``)."""
    body = encode_batch([(b, p.encode(), 0) for b, p in entries])
    header = _send_header(topic, queue_id=queue_id, properties=props(), group=group,
                          default_topic=default_topic, queue_nums=queue_nums, sys_flag=0,
                          flag=0, batch=True)
    cmd = _send_command(code, header, body)
    if batch_flag is not None:
        key = "batch" if code == RequestCode.SEND_MESSAGE else "m"
        cmd.ext_fields[key] = batch_flag
    return cmd


def _send_command(code: int, header: SendMessageRequestHeader, body: bytes) -> RemotingCommand:
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE):
        ext = header.to_ext()
    else:
        ext = header.convert(SendMessageRequestHeaderV2).to_ext()
    return RemotingCommand.request(code, ext, body)


def pull(topic: str, queue_id: int = 0, offset: int = 0, *, group: str = "cg",
         max_nums: int = 32, sys_flag: int = 0, suspend_ms: int = 0, commit_offset: int = 0,
         subscription: str | None = None, max_bytes: int | None = None,
         code: int = RequestCode.PULL_MESSAGE) -> RemotingCommand:
    if subscription is not None:
        sys_flag |= PULL_SUBSCRIPTION
    header = PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset,
        suspend_timeout_millis=suspend_ms, subscription=subscription, sub_version=0,
        max_msg_bytes=max_bytes)
    return RemotingCommand.request(code, header.to_ext())


def create_topic(topic: str, queues: int = 4, *, perm: int = 6,
                 attributes: str | None = None, read: int | None = None) -> RemotingCommand:
    header = CreateTopicRequestHeader(
        topic=topic, default_topic="TBW102", read_queue_nums=queues if read is None else read,
        write_queue_nums=queues, perm=perm, topic_filter_type="SINGLE_TAG",
        attributes=attributes)
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())


def heartbeat(client_id: str, *, consumer_groups: Mapping[str, Mapping[str, str]] | None = None,
              producer_groups: Iterable[str] = ()) -> RemotingCommand:
    """HEART_BEAT; ``consumer_groups`` maps group -> {topic: subscription expression}."""
    consumers = [
        ConsumerData(
            group_name=group, consume_type=ConsumeType.CONSUME_PASSIVELY,
            message_model=MessageModel.CLUSTERING,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            subscription_data_set=[SubscriptionData(topic=t, sub_string=s)
                                   for t, s in subs.items()])
        for group, subs in (consumer_groups or {}).items()
    ]
    data = HeartbeatData(client_id=client_id, consumer_data_set=consumers,
                         producer_data_set=[ProducerData(group_name=g) for g in producer_groups])
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=encode_body(data))


def request(code: int, body: bytes = b"", /, **ext: Any) -> RemotingCommand:
    """Any request; ext values are turned into text."""
    return RemotingCommand.request(code, {k: str(v) for k, v in ext.items()}, body)


class Peer:
    """One client connection to one server address."""

    def __init__(self, addr: str, client: RemotingClient | None = None) -> None:
        self.addr = addr
        self.client = client or RemotingClient(request_timeout=10.0)

    async def __call__(self, cmd: RemotingCommand, timeout: float | None = None
                       ) -> RemotingCommand:
        return await self.client.request(self.addr, cmd, timeout)

    async def ok(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """The response, asserted to be SUCCESS."""
        resp = await self(cmd, timeout)
        assert resp.code == 0, (resp.code, resp.remark)
        return resp

    async def max_offset(self, topic: str, queue_id: int = 0) -> int:
        resp = await self.ok(request(RequestCode.GET_MAX_OFFSET, topic=topic, queueId=queue_id))
        return int(resp.ext_fields["offset"])

    async def messages(self, topic: str, queue_id: int = 0, offset: int = 0,
                       **kw: Any) -> list[MessageExt]:
        resp = await self.ok(pull(topic, queue_id, offset, **kw))
        return decode_messages(resp.full_body())

    async def close(self) -> None:
        await self.client.close()

    async def __aenter__(self) -> Peer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def dispatched(broker: BrokerApp) -> None:
    """Wait until everything the broker stored is visible to pulls (the store's own event)."""
    assert await asyncio.to_thread(broker.store.wait_dispatched, 10.0)


async def eventually_route(ns: Peer, topic: str,
                           until: Callable[[TopicRouteData], bool] = lambda _: True,
                           timeout: float = 5.0) -> TopicRouteData:
    """The name server's route for ``topic`` once it exists and satisfies ``until``: the
    broker re-registers shortly after a change, so the route is polled for (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = await ns(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic))
        assert resp.code in (0, ResponseCode.TOPIC_NOT_EXIST), (resp.code, resp.remark)
        if resp.code == 0:
            route = decode_body(resp.body, TopicRouteData)
            if until(route):
                return route
        assert time.monotonic() < deadline, f"route of {topic} never appeared"
        await asyncio.sleep(0.02)


class LetThroughLater:
    """A pipeline interceptor that lets requests with ``codes`` through only after the
    event loop has turned ``turns`` times (as a rate limiter's wait would): by then the
    connection may have read on."""

    rewrites = False

    def __init__(self, codes: Iterable[int], turns: int = 1) -> None:
        self.codes = frozenset(map(int, codes))
        self.turns = turns

    def wrap(self, code: int, proceed: Handler) -> Handler:
        if code not in self.codes:
            return proceed

        async def later(conn: Connection, request: RemotingCommand) -> object:
            for _ in range(self.turns):
                await asyncio.sleep(0)
            result = proceed(conn, request)
            return await result if isinstance(result, Awaitable) else result

        return later

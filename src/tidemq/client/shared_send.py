"""Many single sends in shared-header send parents (:mod:`tidemq.codec.shared_send`).

:func:`send_many` is what :meth:`~tidemq.client.producer.Producer.send_multi` runs. The
messages for one broker, topic and broker name go out as one BATCH_REQUEST in the shared
send form -- one SEND_MESSAGE_V2 template header, then per message its queue, born
timestamp, flag, properties and body -- when that broker said it reads the form (its
answer to a standard send parent, negotiated by
:class:`~tidemq.client.batch_rpc.BatchRequester`). Everything else, and every message of
a parent the broker refuses, goes through :meth:`Producer.send
<tidemq.client.producer.Producer.send>` as before (one request each, coalesced into
standard parents by the requester).

Each message is prepared as :meth:`Producer.send` prepares it (checked, its
``UNIQ_KEY`` and ``WAIT`` set, compressed from ``compress_over`` bytes) and gets the
result or error a send to its fixed queue gets: one attempt, no retries. A message the
preparation refuses is sent alone, so that it fails exactly as alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, cast

from tidemq.client.batch_rpc import batch_requester, copy_error
from tidemq.client.config import ClientConfig
from tidemq.client.instance import ClientInstance
from tidemq.client.sending import prepare_message, read_send_response
from tidemq.client.stamps import now_ms
from tidemq.client.topic_route import TopicRoute
from tidemq.codec.batch_protocol import CHILD_FORM_KEY, SEND_SHARED_FORM, BatchFormatError
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.compression import compress, sys_flag_for
from tidemq.codec.headers import SendMessageRequestHeader, SendMessageRequestHeaderV2
from tidemq.codec.message import SendOptions
from tidemq.codec.shared_send import (
    RawEntry,
    SendAnswer,
    decode_send_answers,
    encode_shared_send,
)
from tidemq.errors import ResponseCode, TideMQError
from tidemq.formats.properties import MAX_PROPERTIES_BYTES, PropertyKey, encode_properties
from tidemq.types import LOGICAL_BROKER, Message, MessageQueue, SendResult, SendStatus

__all__ = ["send_many"]

_UNIQ = PropertyKey.UNIQ_KEY
_SEND_OK = SendStatus.SEND_OK
#: A member of a shared parent: its index in the caller's items, its UNIQ_KEY.
_Member = tuple[int, str]
Outcome = SendResult | BaseException


class _Producer(Protocol):
    """What this module uses of its :class:`~tidemq.client.producer.Producer` (a protocol,
    so that the producer can import this module without this module importing it)."""

    config: ClientConfig
    _opts: SendOptions

    @property
    def instance(self) -> ClientInstance: ...

    async def send(self, msg: Message, *, queue: MessageQueue | None = None,
                   timeout: float | None = None) -> SendResult: ...


async def send_many(producer: _Producer, items: Sequence[tuple[Message, MessageQueue]],
                    timeout: float | None) -> list[Outcome]:
    """Each item's result or exception, in order (module docstring)."""
    inst = producer.instance
    support = batch_requester(inst).support
    out: list[Outcome | None] = [None] * len(items)
    alone: list[int] = []
    groups: dict[tuple[str, str, str], list[int]] = {}
    if support.enabled and not producer._opts.v1 and len(items) > 1:
        routes: dict[str, TopicRoute | None] = {}
        #: Per (message topic, queue topic, broker name): its group, or None (alone).
        known: dict[tuple[str, str, str], list[int] | None] = {}
        for idx, (msg, mq) in enumerate(items):
            where = (msg.topic, mq.topic, mq.broker_name)
            group = known.get(where, alone)
            if group is alone:  # the first item of these names: its address, once
                addr = await _address(producer, routes, msg, mq)
                group = known[where] = (
                    None if addr is None or not support.shares_send(addr)
                    else groups.setdefault((addr, mq.topic, mq.broker_name), []))
            (alone if group is None else group).append(idx)
    else:
        alone = list(range(len(items)))
    jobs = [_send_group(producer, addr, topic, broker, idxs, items, out, timeout)
            for (addr, topic, broker), idxs in groups.items()]
    if alone:
        jobs.append(_alone(producer, items, alone, out, timeout))
    if len(jobs) == 1:
        await jobs[0]
    else:
        await asyncio.gather(*jobs)
    return cast(list[Outcome], out)  # every item has its outcome now


async def _address(producer: _Producer, routes: dict[str, TopicRoute | None], msg: Message,
                   mq: MessageQueue) -> str | None:
    """The master address of ``mq`` from the topic's route, or ``None`` when this item
    must go alone (its errors are :meth:`Producer.send`'s)."""
    if msg.topic != mq.topic or mq.broker_name == LOGICAL_BROKER:
        return None
    if mq.topic in routes:
        route = routes[mq.topic]
    else:
        try:
            route = await producer.instance.routes.get(mq.topic, allow_default=True)
        except TideMQError:
            route = None
        routes[mq.topic] = route
    return None if route is None else route.master_address(mq.broker_name)


async def _alone(producer: _Producer, items: Sequence[tuple[Message, MessageQueue]],
                 idxs: list[int], out: list[Outcome | None], timeout: float | None) -> None:
    results = await asyncio.gather(
        *(producer.send(items[i][0], queue=items[i][1], timeout=timeout) for i in idxs),
        return_exceptions=True)
    for i, result in zip(idxs, results, strict=True):
        out[i] = result


async def _send_group(producer: _Producer, addr: str, topic: str, broker: str,
                      idxs: list[int], items: Sequence[tuple[Message, MessageQueue]],
                      out: list[Outcome | None], timeout: float | None) -> None:
    """The items of one (broker, topic, broker name) as shared send parents."""
    rpc = batch_requester(producer.instance)
    opts = producer._opts
    born = now_ms()
    entries: list[RawEntry] = []
    members: list[_Member] = []
    alone: list[int] = []
    cuts = [0]  # where each parent starts (within max_children and max_bytes)
    size = 0
    for idx in idxs:
        msg, mq = items[idx]
        prepared = _prepare(producer, msg, mq, born)
        if prepared is None:
            alone.append(idx)
            continue
        entry, uniq = prepared
        weight = len(entry[4]) + len(entry[5]) + 26
        if len(members) - cuts[-1] >= rpc.max_children or (
                size + weight > rpc.max_bytes and len(members) > cuts[-1]):
            cuts.append(len(members))
            size = 0
        entries.append(entry)
        members.append((idx, uniq))
        size += weight
    jobs = []
    if alone:
        jobs.append(_alone(producer, items, alone, out, timeout))
    if len(members) == 1:
        jobs.append(_alone(producer, items, [members[0][0]], out, timeout))
    elif members:
        template = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, SendMessageRequestHeader(
            producer_group=opts.producer_group, topic=topic, default_topic=opts.default_topic,
            default_topic_queue_nums=opts.default_topic_queue_nums, queue_id=0, sys_flag=0,
            born_timestamp=born, flag=0, broker_name=broker,
        ).convert(SendMessageRequestHeaderV2).to_ext())
        for start, end in zip(cuts, [*cuts[1:], len(members)], strict=True):
            jobs.append(_parent(producer, addr, topic, broker, template, entries[start:end],
                                members[start:end], items, out, timeout))
    await asyncio.gather(*jobs)


def _prepare(producer: _Producer, msg: Message, mq: MessageQueue, born: int
             ) -> tuple[RawEntry, str] | None:
    """``msg``'s entry and UNIQ_KEY, prepared as :meth:`Producer.send` prepares it; ``None``
    when that preparation fails (the message then goes alone, to fail as alone)."""
    opts = producer._opts
    try:
        msg = prepare_message(msg, max_size=producer.config.max_message_size,
                              keys=producer.instance.uniq_keys, now_ms=born)
    except TideMQError:
        return None
    props = msg.properties
    uniq = props[_UNIQ]
    text = encode_properties(props)
    if len(text) > MAX_PROPERTIES_BYTES:
        return None
    body = bytes(msg.body)
    sys_flag = 0
    if 0 < opts.compress_over <= len(body):
        body = compress(body, opts.compression, opts.compression_level)
        sys_flag = sys_flag_for(opts.compression)
    return (mq.queue_id, sys_flag, born, msg.flag, text, body), uniq


async def _parent(producer: _Producer, addr: str, topic: str, broker: str,
                  template: RemotingCommand, entries: list[RawEntry], members: list[_Member],
                  items: Sequence[tuple[Message, MessageQueue]], out: list[Outcome | None],
                  timeout: float | None) -> None:
    inst = producer.instance
    rpc = batch_requester(inst)
    parent = encode_shared_send(template, entries)
    wait = producer.config.send_msg_timeout if timeout is None else timeout
    rpc.count_parent(len(members))
    try:
        response = await inst.request(addr, parent, wait)
    except TideMQError as exc:
        for idx, _ in members:
            out[idx] = copy_error(exc)
        return
    if response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        rpc.support.mark(addr, False)
    elif response.code != ResponseCode.SUCCESS or response.ext_fields.get(
            CHILD_FORM_KEY) != SEND_SHARED_FORM:
        rpc.support.mark_send_shared(addr, False)
    else:
        _read(response, addr, topic, broker, members, items, out)
        return
    # Not read as the shared form: each message goes alone, as it would have.
    await _alone(producer, items, [idx for idx, _ in members], out, timeout)


def _read(response: RemotingCommand, addr: str, topic: str, broker: str,
          members: list[_Member], items: Sequence[tuple[Message, MessageQueue]],
          out: list[Outcome | None]) -> None:
    body = response.body if response.body_parts is None else response.full_body()
    try:
        answers = decode_send_answers(body, len(members))
    except BatchFormatError as exc:
        for idx, _ in members:
            out[idx] = BatchFormatError(exc.reason)
        return
    for (idx, uniq), answer in zip(members, answers, strict=True):
        mq = items[idx][1]
        if isinstance(answer, SendAnswer):
            queue = mq if answer.queue_id == mq.queue_id else MessageQueue(
                topic, broker, answer.queue_id)
            out[idx] = SendResult(_SEND_OK, uniq, answer.msg_id, queue, answer.queue_offset)
            continue
        try:
            out[idx] = read_send_response(answer, mq, address=addr, msg_id=uniq)
        except TideMQError as exc:
            out[idx] = exc



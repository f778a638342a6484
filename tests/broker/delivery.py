"""Helpers for consumer-group tests: waiting for messages by long polling, looking records up
by id, reading what a broker has parked, and building send-back and retry sends."""

from __future__ import annotations

import time

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.delay import SCHEDULE_TOPIC
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
    SendMessageRequestHeaderV2,
)
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.formats.record import Record, decode_record
from tidemq.types import MessageExt


async def collect(peer: Peer, topic: str, count: int, *, queue_id: int = 0, offset: int = 0,
                  timeout: float = 10.0) -> list[MessageExt]:
    """The first ``count`` messages of a queue from ``offset``, waiting for them with
    long-polling pulls (the broker answers as soon as one is stored)."""
    out: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(out) < count:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(out)} of {count} messages arrived in {topic}"
        cmd = wire.pull(topic, queue_id, offset, sys_flag=wire.PULL_SUSPEND,
                        suspend_ms=int(min(left, 5.0) * 1000), max_nums=count - len(out))
        resp = await peer(cmd, timeout=left + 5)
        if resp.code == ResponseCode.SUCCESS:
            out += decode_messages(resp.full_body())
        else:
            assert resp.code in (ResponseCode.PULL_NOT_FOUND,
                                 ResponseCode.PULL_RETRY_IMMEDIATELY), (resp.code, resp.remark)
        offset = int(resp.ext_fields["nextBeginOffset"])
    return out


async def view(peer: Peer, msg_id: str) -> MessageExt:
    """The stored message an offset message id names (VIEW_MESSAGE_BY_ID)."""
    _, phys = decode_offset_msg_id(msg_id)
    resp = await peer.ok(wire.request(RequestCode.VIEW_MESSAGE_BY_ID, offset=phys))
    [msg] = decode_messages(resp.full_body())
    return msg


async def stored(peer: Peer, topic: str, body: bytes = b"payload", *, queue_id: int = 0,
                 properties: str | None = None) -> MessageExt:
    """Send one message and return it as stored."""
    resp = await peer.ok(wire.send(topic, body, queue_id=queue_id, properties=properties))
    return await view(peer, resp.ext_fields["msgId"])


def parked(broker: BrokerApp, level: int) -> list[Record]:
    """Every record the broker holds in the schedule queue of ``level``."""
    return records(broker, SCHEDULE_TOPIC, level - 1)


def records(broker: BrokerApp, topic: str, queue_id: int = 0) -> list[Record]:
    """The first thousand records the broker's store holds in a queue, decoded."""
    res = broker.store.get(topic, queue_id, 0, 1000)
    out = []
    for buf in res.buffers:
        pos = 0
        while pos < len(buf):
            rec = decode_record(buf, pos)
            assert isinstance(rec, Record)
            out.append(rec)
            pos += rec.total_size
    return out


def send_back(offset: int, group: str, delay_level: int = 0, *,
              max_times: int | None = None) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(offset=offset, group=group,
                                              delay_level=delay_level,
                                              max_reconsume_times=max_times)
    return RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext())


def retry_send(group: str, body: bytes = b"again", *, reconsume: int | None = None,
               max_times: int | None = None, properties: str | None = None,
               batch: bool = False) -> RemotingCommand:
    """SEND_MESSAGE_V2 to ``%RETRY%<group>`` as a Java consumer's fallback resend does."""
    header = SendMessageRequestHeader(
        producer_group="CLIENT_INNER_PRODUCER", topic=f"%RETRY%{group}",
        default_topic="TBW102", default_topic_queue_nums=4, queue_id=0, sys_flag=0,
        born_timestamp=int(time.time() * 1000), flag=0,
        properties=wire.props() if properties is None else properties,
        reconsume_times=reconsume, max_reconsume_times=max_times, batch=batch)
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                   header.convert(SendMessageRequestHeaderV2).to_ext(), body)

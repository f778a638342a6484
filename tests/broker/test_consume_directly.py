"""CONSUME_MESSAGE_DIRECTLY (309) on the wire: what the broker passes on to the consumer
(the record at the offset id, its own name, the topic's flag) and what it answers when
it cannot -- a bad msgId, no record there, a consumer not online. The consumer here is
a bare connection with a handler for 309, so every byte it is sent is seen."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.bodies import CMResult, ConsumeMessageDirectlyResult, decode_body, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode
from tidemq.formats.msgid import decode_offset_msg_id, encode_offset_msg_id
from tidemq.net import Connection, RemotingClient
from tidemq.testing import Cluster

TOPIC, GROUP, CLIENT = "DirectWire", "direct-wire", "127.0.0.1@direct@1"


class BareConsumer:
    """A connection that heartbeats as consumer CLIENT of GROUP and answers 309 with
    CR_SUCCESS, keeping what it was sent."""

    def __init__(self, addr: str) -> None:
        self.client = RemotingClient(request_timeout=10.0)
        self.client.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_309)
        self.peer = Peer(addr, self.client)
        self.asked: list[RemotingCommand] = []

    def _on_309(self, _conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.asked.append(cmd)
        result = ConsumeMessageDirectlyResult(consume_result=CMResult.CR_SUCCESS,
                                              spent_time_mills=1)
        return cmd.response(body=encode_body(result))


@pytest.fixture
async def consumer(cluster: Cluster) -> AsyncIterator[BareConsumer]:
    bare = BareConsumer(cluster.brokers[0].broker_addr)
    await bare.peer.ok(wire.heartbeat(CLIENT, consumer_groups={GROUP: {TOPIC: "*"}}))
    yield bare
    await bare.peer.close()


async def _stored(peer: Peer) -> str:
    await peer.ok(wire.create_topic(TOPIC, 1))
    sent = await peer.ok(wire.send(TOPIC, b"again", properties=wire.props(tags="t")))
    return sent.ext_fields["msgId"]


def _ask(msg_id: str, **ext: str) -> RemotingCommand:
    fields = {"consumerGroup": GROUP, "clientId": CLIENT, "msgId": msg_id, "topic": TOPIC}
    fields.update(ext)
    return RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY,
                                   {k: v for k, v in fields.items() if v})


async def test_the_consumer_is_sent_the_record_and_the_brokers_name(
        cluster: Cluster, peer: Peer, consumer: BareConsumer) -> None:
    offset_id = await _stored(peer)
    answer = await peer.ok(_ask(offset_id))
    result = decode_body(answer.full_body(), ConsumeMessageDirectlyResult)
    assert result.consume_result is CMResult.CR_SUCCESS
    [asked] = consumer.asked
    assert asked.ext_fields["brokerName"] == cluster.brokers[0].config.broker_name
    assert asked.ext_fields["topicSysFlag"] == "0"
    assert (asked.ext_fields["consumerGroup"], asked.ext_fields["clientId"],
            asked.ext_fields["msgId"]) == (GROUP, CLIENT, offset_id)
    [msg] = decode_messages(asked.full_body())
    assert (msg.topic, msg.body, msg.tags) == (TOPIC, b"again", "t")
    assert msg.commit_log_offset == decode_offset_msg_id(offset_id)[1]


async def test_what_cannot_be_passed_on_is_answered(
        cluster: Cluster, peer: Peer, consumer: BareConsumer) -> None:
    offset_id = await _stored(peer)
    host, phys = decode_offset_msg_id(offset_id)
    cases = [
        (_ask("not-an-id"), ResponseCode.INVALID_PARAMETER, "offset id"),
        (_ask(""), ResponseCode.INVALID_PARAMETER, "offset id"),
        (_ask(offset_id, clientId=""), ResponseCode.INVALID_PARAMETER, "clientId"),
        (_ask(encode_offset_msg_id(host, phys + 1)), ResponseCode.NO_MESSAGE,
         f"offset {phys + 1}"),
        (_ask(encode_offset_msg_id(host, 1 << 40)), ResponseCode.NO_MESSAGE, "no message"),
        (_ask(offset_id, clientId="127.0.0.1@other@2"), ResponseCode.CONSUMER_NOT_ONLINE,
         "127.0.0.1@other@2"),
        (_ask(offset_id, consumerGroup="nobody"), ResponseCode.CONSUMER_NOT_ONLINE, "nobody"),
    ]
    for cmd, code, words in cases:
        answer = await peer(cmd)
        assert answer.code == code, (cmd.ext_fields, answer.remark)
        assert words in (answer.remark or ""), answer.remark
    assert consumer.asked == []
    await peer.ok(_ask(offset_id))  # and the broker still serves
    assert len(consumer.asked) == 1


async def test_a_consumer_gone_before_it_answers(cluster: Cluster, peer: Peer) -> None:
    offset_id = await _stored(peer)
    bare = BareConsumer(cluster.brokers[0].broker_addr)
    held = asyncio.Event()

    async def never(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        held.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    bare.client.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, never)
    await bare.peer.ok(wire.heartbeat(CLIENT, consumer_groups={GROUP: {TOPIC: "*"}}))
    asking = asyncio.ensure_future(peer(_ask(offset_id)))
    await held.wait()
    await bare.peer.close()
    answer = await asking
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert CLIENT in (answer.remark or "")

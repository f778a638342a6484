"""Hypothesis against a LIVE broker: batch-protocol parents with generated, mangled bodies.

Every parent gets a response: a merged one with exactly one child response per child
frame, in order, each with its child's opaque and the response flag; or a refusal with a
RocketMQ code and a remark. No processor crashes, and a second, well-behaved connection
keeps being served after every example.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.batch_protocol import (
    DISPATCH_CODE_KEY,
    MERGED_REMARK,
    BatchFormatError,
    decode_children,
    encode_children,
)
from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.errors import ResponseCode
from tidemq.testing import Cluster

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

CODES = [RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE,
         RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE,
         RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET,
         RequestCode.GET_MAX_OFFSET]


class Crashes(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


@pytest.fixture
async def crashes(cluster: Cluster, peer: Peer) -> AsyncIterator[Crashes]:
    await peer.ok(wire.create_topic("Fb", 2))
    await peer.ok(wire.create_topic("Baseline", 1))
    await peer.ok(wire.send("Fb", b"seed"))
    handler = Crashes()
    logger = logging.getLogger("tidemq")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _legit(code: int, queue_id: int, offset: int, body: bytes) -> RemotingCommand:
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        return wire.send("Fb", body, code=code, queue_id=queue_id)
    if code == RequestCode.SEND_BATCH_MESSAGE:
        return wire.send_batch("Fb", [(body, wire.props())], queue_id=queue_id)
    if code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        return wire.pull("Fb", queue_id, offset, code=code, sys_flag=wire.PULL_SUSPEND,
                         suspend_ms=50)
    if code == RequestCode.UPDATE_CONSUMER_OFFSET:
        return wire.request(code, consumerGroup="fz", topic="Fb", queueId=queue_id,
                            commitOffset=offset)
    if code == RequestCode.QUERY_CONSUMER_OFFSET:
        return wire.request(code, consumerGroup="fz", topic="Fb", queueId=queue_id)
    return wire.request(code, topic="Fb", queueId=queue_id)


_junk = st.sampled_from(["", "-1", "x", "99999999999999999999", "Nope", "bad topic", "0"])


@st.composite
def children(draw: st.DrawFn, code: int) -> RemotingCommand:
    """A child of ``code`` (sometimes of another), its ext fields sometimes mangled."""
    child_code = code if draw(st.integers(0, 5)) else draw(st.sampled_from(CODES))
    cmd = _legit(child_code, draw(st.integers(-1, 3)), draw(st.integers(-2, 5)),
                 draw(st.binary(max_size=24)))
    for key in list(cmd.ext_fields):
        roll = draw(st.integers(0, 12))
        if roll == 0:
            del cmd.ext_fields[key]
        elif roll == 1:
            cmd.ext_fields[key] = draw(_junk)
    for key in ("suspendTimeoutMillis",):  # a generated long poll waits at most 100 ms
        if key in cmd.ext_fields and cmd.ext_fields[key] not in ("50", ""):
            cmd.ext_fields[key] = "100"
    cmd.opaque = draw(st.integers(0, 20))
    return cmd


@st.composite
def parents(draw: st.DrawFn) -> RemotingCommand:
    code = draw(st.sampled_from([*CODES, RequestCode.HEART_BEAT, 0]))
    kids = draw(st.lists(children(int(code) or RequestCode.GET_MAX_OFFSET), max_size=6))
    if draw(st.booleans()):  # distinct opaques, as a correct client sends
        for i, kid in enumerate(kids, 1):
            kid.opaque = i
    body = bytearray(b"".join(bytes(p) for p in encode_children(kids)))
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(body)))
        body[i:i + draw(st.integers(0, 6))] = draw(st.binary(max_size=10))
    ext = {DISPATCH_CODE_KEY: str(code)} if draw(st.integers(0, 9)) else {}
    return RemotingCommand.request(RequestCode.BATCH_REQUEST, ext, bytes(body))


@FUZZ
@given(parent=parents())
async def test_generated_parents_are_answered_and_others_keep_being_served(
        cluster: Cluster, peer: Peer, crashes: Crashes, parent: RemotingCommand) -> None:
    body = bytes(parent.body)
    resp = await peer(parent, timeout=10)
    assert resp.is_response
    if resp.code == ResponseCode.SUCCESS:
        assert resp.remark == MERGED_REMARK
        sent = decode_children(body)
        got = decode_children(resp.body)
        assert len(got) == len(sent)
        for req, ans in zip(sent, got, strict=True):
            assert ans.command is not None
            assert ans.command.flag & FLAG_RESPONSE
            assert ans.command.opaque == req.opaque
            if ans.command.code != ResponseCode.SUCCESS:
                assert ans.command.remark, ans.command
    else:
        assert resp.remark, resp.code
        assert resp.code in ResponseCode.__members__.values()
        if DISPATCH_CODE_KEY in parent.ext_fields and parent.ext_fields[DISPATCH_CODE_KEY] in {
                str(c) for c in CODES}:
            with pytest.raises(BatchFormatError):
                _strict(body)
    async with Peer(cluster.brokers[0].broker_addr) as other:
        await other.ok(wire.send("Baseline", b"still here"), timeout=10)
    assert not crashes.records, crashes.records[0]


def _strict(body: bytes) -> None:
    """Raise what made the broker refuse a parent of a supported code."""
    kids = decode_children(body)
    opaques = [k.opaque for k in kids if k.command is not None]
    if len(set(opaques)) != len(opaques):
        raise BatchFormatError("duplicate opaques")

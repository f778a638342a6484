"""Lent bodies (:class:`FrameDecoder`'s ``lent`` codes): a request of such a code gets its
body as a view of the receive buffer, equal to what was sent while it is handled; every
other frame, responses included, gets a body of its own that later reads leave alone."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.codec.test_frame import commands

from tidemq.codec.command import FLAG_RESPONSE, RemotingCommand, RequestCode
from tidemq.codec.frame import FrameDecoder, frame_bytes

_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)


def _handled(dec: FrameDecoder, data: bytes, reads: list[int], sent: list[RemotingCommand]
             ) -> list[RemotingCommand]:
    """Feed ``data`` as a transport does (reads of the sizes ``reads`` cycles through)
    and check each command as its handler would, before the next read: a lent body
    equals the sent one then. Returns the commands, their bodies kept as handed out."""
    out: list[RemotingCommand] = []
    pos = i = 0
    while pos < len(data):
        view = dec.get_buffer(-1)
        n = min(reads[i % len(reads)], len(view), len(data) - pos)
        i += 1
        view[:n] = data[pos : pos + n]
        del view
        dec.buffer_updated(n)
        pos += n
        while (cmd := dec.next_command()) is not None:
            lent = cmd.code in dec.lent and not cmd.flag & FLAG_RESPONSE
            assert type(cmd.body) is (memoryview if lent else bytes)
            assert bytes(cmd.body) == sent[len(out)].body
            out.append(cmd)
    return out


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands(), min_size=1, max_size=8), st.data(),
       st.lists(st.integers(1, 300), min_size=1, max_size=5), st.integers(0, 4096))
def test_lent_bodies_are_whole_while_handled_and_kept_bodies_stay(
        cmds: list[RemotingCommand], data: st.DataObject, reads: list[int], keep: int) -> None:
    lent = data.draw(st.frozensets(st.sampled_from([c.code for c in cmds])))
    dec = FrameDecoder(keep_capacity=keep, lent=lent)
    stream = b"".join(frame_bytes(c) for c in cmds)
    got = _handled(dec, stream + stream, reads, cmds + cmds)  # the buffer is reused
    for cmd, sent in zip(got, cmds + cmds, strict=True):
        if type(cmd.body) is bytes:  # a copy: still what was sent, after every later read
            assert cmd.body == sent.body


def test_a_response_with_a_lent_code_number_gets_its_own_body() -> None:
    """Response codes share numbers with request codes: only requests are lent."""
    dec = FrameDecoder(lent={_SEND_BATCH})
    request = RemotingCommand.request(_SEND_BATCH, {"a": "1"}, b"request body")
    response = RemotingCommand(code=_SEND_BATCH, flag=FLAG_RESPONSE, body=b"response body")
    dec.receive_data(frame_bytes(request) + frame_bytes(response))
    first, second = dec.next_command(), dec.next_command()
    assert first is not None and second is not None
    assert type(first.body) is memoryview and first.body == b"request body"
    assert type(second.body) is bytes and second.body == b"response body"


def test_a_lent_body_kept_past_the_next_read_sees_the_buffer_reused() -> None:
    """Why a handler copies what it keeps: the next read writes over a lent body."""
    dec = FrameDecoder(lent={_SEND_BATCH})
    first = frame_bytes(RemotingCommand.request(_SEND_BATCH, body=b"A" * 64))
    second = frame_bytes(RemotingCommand.request(_SEND_BATCH, body=b"B" * 64))
    dec.receive_data(first)
    kept = dec.next_command()
    assert kept is not None and kept.body == b"A" * 64
    assert dec.next_command() is None
    dec.receive_data(second)  # the buffer was emptied: the read lands where the first was
    assert kept.body == b"B" * 64

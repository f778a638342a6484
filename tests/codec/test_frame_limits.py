"""FrameDecoder against hostile lengths: memory follows the bytes received, not the
length announced; an oversized frame is reported with its header and skipped."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.codec.test_frame import commands

from tidemq.codec.command import RemotingCommand, SerializeType
from tidemq.codec.frame import (
    FrameDecoder,
    FrameTooLarge,
    FrameTooLargeToSend,
    encode_command,
    frame_bytes,
)
from tidemq.errors import RemoteProtocolError

MIB = 1024 * 1024


def test_an_announced_length_reserves_nothing() -> None:
    dec = FrameDecoder()
    start = dec.capacity
    dec.receive_data(struct.pack(">ii", 16 * MIB - 8, 0) + b"abc")
    assert dec.next_command() is None
    view = dec.get_buffer(-1)  # what a transport would read into next
    assert dec.capacity == start and len(view) < start


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(70_000, 3 * MIB), st.lists(st.integers(1000, 400_000), min_size=1,
                                               max_size=4))
def test_the_buffer_grows_with_the_bytes_received(size: int, reads: list[int]) -> None:
    """Never more than twice the bytes of the partial frame and the free space a read is
    offered (or the first buffer)."""
    data = frame_bytes(RemotingCommand(code=1, body=b"x" * size))
    dec = FrameDecoder()
    pos, i = 0, 0
    while pos < len(data) - 1:
        view = dec.get_buffer(-1)
        n = min(reads[i % len(reads)], len(view), len(data) - 1 - pos)
        view[:n] = data[pos : pos + n]
        del view
        dec.buffer_updated(n)
        pos, i = pos + n, i + 1
        assert dec.next_command() is None
        assert dec.capacity <= max(2 * (dec.buffered + 16 * 1024), 64 * 1024)
    dec.receive_data(data[-1:])
    cmd = dec.next_command()
    assert cmd is not None and len(cmd.body) == size


@pytest.mark.parametrize("stype", list(SerializeType))
def test_an_oversized_frame_is_reported_with_its_header_and_skipped(
        stype: SerializeType) -> None:
    big = RemotingCommand(code=310, opaque=77, ext_fields={"topic": "T"},
                          body=b"x" * (2 * MIB), serialize_type=stype)
    after = RemotingCommand(code=11, opaque=78, body=b"next", serialize_type=stype)
    data = frame_bytes(big) + frame_bytes(after)
    dec = FrameDecoder(max_frame_size=MIB)
    dec.receive_data(data[:400])
    with pytest.raises(FrameTooLarge) as info:
        dec.next_command()
    err = info.value
    assert (err.size, err.limit) == (len(frame_bytes(big)) - 4, MIB)
    assert err.command is not None
    assert (err.command.code, err.command.opaque, err.command.ext_fields) == (
        310, 77, {"topic": "T"})
    assert str(err.size) in str(err) and str(MIB) in str(err)
    for i in range(400, len(data), 64 * 1024):  # the rest of it is dropped as it comes
        dec.receive_data(data[i : i + 64 * 1024])
        cmd = dec.next_command()
        assert dec.capacity <= 256 * 1024
        if cmd is not None:
            break
    assert cmd == after
    assert dec.next_command() is None and dec.buffered == 0


def test_an_oversized_frame_with_an_unreadable_header_has_no_command() -> None:
    dec = FrameDecoder(max_frame_size=MIB, max_oversized_header=1000)
    dec.receive_data(struct.pack(">ii", 2 * MIB, 5000))  # header longer than waited for
    with pytest.raises(FrameTooLarge) as info:
        dec.next_command()
    assert info.value.command is None
    dec = FrameDecoder(max_frame_size=MIB)
    dec.receive_data(struct.pack(">ii", 2 * MIB, 5) + b"{nope")  # garbage JSON
    with pytest.raises(FrameTooLarge) as info:
        dec.next_command()
    assert info.value.command is None
    assert isinstance(info.value, RemoteProtocolError)


def _events(dec: FrameDecoder) -> list[object]:
    """Commands, and oversized frames as ``(size, code, opaque)``, until more is needed."""
    out: list[object] = []
    while True:
        try:
            cmd = dec.next_command()
        except FrameTooLarge as exc:
            assert exc.command is not None
            out.append((exc.size, exc.command.code, exc.command.opaque))
            continue
        if cmd is None:
            return out
        out.append(cmd)


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[RemotingCommand], list[bool]]:
    cmds = draw(st.lists(commands(), min_size=1, max_size=5))
    big = draw(st.lists(st.booleans(), min_size=len(cmds), max_size=len(cmds)))
    for cmd, oversized in zip(cmds, big, strict=True):
        if oversized:
            cmd.body = b"z" * 600
    return cmds, big


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_byte_by_byte_equals_all_at_once_with_oversized_frames(
        stream: tuple[list[RemotingCommand], list[bool]]) -> None:
    cmds, big = stream
    data = b"".join(frame_bytes(c) for c in cmds)
    # The limit is the longest of the frames not made big; longer ones are oversized.
    limit = max((len(frame_bytes(c)) - 4 for c, b in zip(cmds, big, strict=True) if not b),
                default=4)
    expected: list[object] = []
    for cmd in cmds:
        size = len(frame_bytes(cmd)) - 4
        expected.append(cmd if size <= limit else (size, cmd.code, cmd.opaque))
    whole = FrameDecoder(max_frame_size=limit)
    whole.receive_data(data)
    at_once = _events(whole)
    trickle = FrameDecoder(max_frame_size=limit)
    one_by_one: list[object] = []
    for i in range(len(data)):
        trickle.receive_data(data[i : i + 1])
        one_by_one += _events(trickle)
    assert at_once == one_by_one == expected
    assert whole.buffered == trickle.buffered == 0


def test_encode_refuses_a_frame_over_the_limit() -> None:
    cmd = RemotingCommand(code=310, body=b"x" * 2000)
    size = len(frame_bytes(cmd)) - 4
    assert encode_command(cmd, limit=size)
    with pytest.raises(FrameTooLargeToSend) as info:
        encode_command(cmd, limit=size - 1)
    assert (info.value.size, info.value.limit, info.value.code) == (size, size - 1, 310)


def test_a_kept_buffer_is_spare_between_frames_and_can_be_given_back() -> None:
    dec = FrameDecoder()
    first = dec.capacity
    data = frame_bytes(RemotingCommand(code=1, body=b"x" * 500_000))
    dec.receive_data(data[:-1])
    assert dec.next_command() is None
    assert dec.spare == 0  # in use by the frame
    dec.release()  # not while a frame is pending
    assert dec.capacity > 500_000
    dec.receive_data(data[-1:])
    assert dec.next_command() is not None
    assert dec.spare == dec.capacity - first > 0  # kept for the next large frame
    dec.release()
    assert (dec.capacity, dec.spare) == (first, 0)
    dec.receive_data(data)
    cmd = dec.next_command()
    assert cmd is not None and len(cmd.body) == 500_000


@pytest.mark.parametrize(("start", "hint"), [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "'HTTP': the peer speaks HTTP"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "'GET ': the peer speaks HTTP"),
    (b"SSH-2.0-OpenSSH_9.2\r\n", "'SSH-': the peer speaks text"),
])
def test_an_oversized_length_that_reads_as_text_names_the_peers_protocol(
        start: bytes, hint: str) -> None:
    """A remoting client pointed at a web console or a metrics port reads the answer's
    first four bytes as a length of about a gigabyte: the error says what they were."""
    dec = FrameDecoder()
    dec.receive_data(start)
    with pytest.raises(FrameTooLarge) as info:
        dec.next_command()
    assert hint in str(info.value)


@given(st.integers(16 * MIB + 1, 2**31 - 1).filter(
    lambda n: not all(0x20 <= b < 0x7F for b in n.to_bytes(4, "big"))))
def test_an_oversized_binary_length_has_no_protocol_hint(size: int) -> None:
    assert str(FrameTooLarge(size, 16 * MIB, None)) == (
        f"frame of {size} bytes exceeds the maximum of {16 * MIB} bytes")

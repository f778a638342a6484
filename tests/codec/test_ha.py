"""The HA transfer codec: offset reports and transfer frames, split anywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec.ha import (
    FRAME_HEADER_SIZE,
    ReportDecoder,
    TransferDecoder,
    TransferStream,
    encode_frame_header,
    encode_report,
)
from tidemq.errors import LocalProtocolError, RemoteProtocolError

offsets = st.integers(0, 2**63 - 1)
frames = st.lists(st.tuples(offsets, st.binary(max_size=300)), max_size=12)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return out


def test_layout() -> None:
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    assert encode_frame_header(1, 2) == bytes(7) + b"\x01" + bytes(3) + b"\x02"
    with pytest.raises(LocalProtocolError):
        encode_report(-1)
    with pytest.raises(LocalProtocolError):
        encode_frame_header(0, -1)


@given(frames, st.lists(st.integers(0, 10_000), max_size=8))
def test_frames_survive_any_split(sent: list[tuple[int, bytes]], cuts: list[int]) -> None:
    wire = b"".join(encode_frame_header(o, len(d)) + d for o, d in sent)
    dec = TransferDecoder(max_body=300)
    got = []
    for part in _cut(wire, cuts):
        dec.receive(part)
        while (frame := dec.next_frame()) is not None:
            got.append(frame)
    assert got == sent
    assert dec.buffered == 0


@given(frames, st.lists(st.integers(0, 10_000), max_size=8))
def test_a_stream_hands_on_every_body_byte_at_its_offset(sent: list[tuple[int, bytes]],
                                                         cuts: list[int]) -> None:
    """Whatever the reads, the pieces are the bodies, in order, each byte at its offset."""
    wire = b"".join(encode_frame_header(o, len(d)) + d for o, d in sent)
    stream = TransferStream(max_body=300)
    pieces: list[tuple[int, bytes]] = []
    for part in _cut(wire, cuts):
        pieces += [(at, bytes(view)) for at, view in stream.feed(memoryview(part))]
    assert all(piece for _, piece in pieces)
    assert b"".join(p for _, p in pieces) == b"".join(d for _, d in sent)
    # each byte at its own offset
    assert [at + i for at, p in pieces for i in range(len(p))] == \
        [o + i for o, d in sent for i in range(len(d))]
    assert stream.frames == len(sent) and not stream.in_frame


def test_a_stream_refuses_garbage_before_handing_anything_on() -> None:
    stream = TransferStream(max_body=1024)
    with pytest.raises(RemoteProtocolError, match="exceeds 1024"):
        stream.feed(encode_frame_header(0, 1025) + b"x" * 10)
    stream = TransferStream(max_body=1024)
    assert stream.feed(b"\xff" * 5) == [] and stream.in_frame  # a head cut by the read
    with pytest.raises(RemoteProtocolError, match="negative"):
        stream.feed(b"\xff" * 7)
    stream = TransferStream(max_body=8)
    assert stream.feed(encode_frame_header(42, 0)) == [] and stream.frames == 1


@given(st.lists(offsets, min_size=1, max_size=10), st.lists(st.integers(0, 100), max_size=5))
def test_the_newest_complete_report_wins(reports: list[int], cuts: list[int]) -> None:
    wire = b"".join(map(encode_report, reports))
    dec = ReportDecoder()
    seen = [r for part in _cut(wire, cuts) if (r := dec.receive(part)) is not None]
    assert seen[-1] == reports[-1]
    assert all(r in reports for r in seen)


def test_garbage_is_refused_before_it_is_buffered() -> None:
    dec = TransferDecoder(max_body=1024)
    dec.receive(encode_frame_header(0, 1025))
    with pytest.raises(RemoteProtocolError, match="exceeds 1024"):
        dec.next_frame()
    dec = TransferDecoder(max_body=1024)
    dec.receive(b"\xff" * FRAME_HEADER_SIZE)
    with pytest.raises(RemoteProtocolError, match="negative"):
        dec.next_frame()
    with pytest.raises(RemoteProtocolError, match="negative"):
        ReportDecoder().receive(b"\xff" * 8)


def test_a_heartbeat_is_an_empty_frame() -> None:
    dec = TransferDecoder(max_body=8)
    dec.receive(encode_frame_header(42, 0))
    assert dec.next_frame() == (42, b"")
    assert dec.next_frame() is None

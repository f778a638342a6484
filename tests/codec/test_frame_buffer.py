"""FrameDecoder's read-into-buffer path (``get_buffer`` / ``buffer_updated``), as an
``asyncio.BufferedProtocol`` transport drives it: same commands as ``receive_data``."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.codec.test_frame import commands

from tidemq.codec.command import RemotingCommand
from tidemq.codec.frame import FrameDecoder, frame_bytes


def _read_into(dec: FrameDecoder, data: bytes, reads: list[int]) -> list[RemotingCommand]:
    """Feed ``data`` through ``get_buffer``, each read at most the next size of ``reads``
    (cycled) and at most the space offered; collect the commands after each read."""
    out: list[RemotingCommand] = []
    pos, i = 0, 0
    while pos < len(data):
        view = dec.get_buffer(-1)
        assert len(view) >= 1
        n = min(reads[i % len(reads)], len(view), len(data) - pos)
        i += 1
        view[:n] = data[pos : pos + n]
        del view  # a transport drops its view after the read
        dec.buffer_updated(n)
        pos += n
        while (c := dec.next_command()) is not None:
            out.append(c)
    return out


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands(), min_size=1, max_size=6),
       st.lists(st.integers(1, 200_000), min_size=1, max_size=5),
       st.integers(0, 300_000))
def test_buffered_reads_equal_receive_data(cmds: list[RemotingCommand], reads: list[int],
                                           keep: int) -> None:
    data = b"".join(frame_bytes(c) for c in cmds)
    assert _read_into(FrameDecoder(keep_capacity=keep), data, reads) == cmds


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 400_000), min_size=1, max_size=4),
       st.lists(st.integers(1, 300_000), min_size=1, max_size=4))
def test_large_bodies_in_buffer_and_copy_paths(sizes: list[int], reads: list[int]) -> None:
    cmds = [RemotingCommand(code=i, opaque=i, body=bytes([i % 251]) * size)
            for i, size in enumerate(sizes)]
    data = b"".join(frame_bytes(c) for c in cmds)
    dec = FrameDecoder(keep_capacity=100_000)
    got = _read_into(dec, data, reads)
    assert [c.body for c in got] == [c.body for c in cmds]
    assert dec.buffered == 0
    mixed = FrameDecoder(keep_capacity=100_000)  # copy path and buffer path interleaved
    half = len(data) // 2
    mixed.receive_data(data[:half])
    out = []
    while (c := mixed.next_command()) is not None:
        out.append(c)
    out += _read_into(mixed, data[half:], reads)
    assert [c.body for c in out] == [c.body for c in cmds]


def test_view_held_by_transport_does_not_block_growth() -> None:
    dec = FrameDecoder()
    held = dec.get_buffer(-1)  # a transport still holding its last view
    big = frame_bytes(RemotingCommand(code=1, body=b"x" * 500_000))
    dec.receive_data(big)  # must grow without resizing the exported buffer
    cmd = dec.next_command()
    assert cmd is not None and cmd.body == b"x" * 500_000
    assert len(held) > 0


def test_clear_drops_pending_bytes() -> None:
    dec = FrameDecoder()
    dec.receive_data(frame_bytes(RemotingCommand(code=1, body=b"abc"))[:7])
    dec.clear()
    assert dec.buffered == 0
    dec.receive_data(frame_bytes(RemotingCommand(code=2, body=b"d")))
    cmd = dec.next_command()
    assert cmd is not None and cmd.code == 2

"""Offset message ids: golden strings, round trips, garbage."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.errors import CorruptRecord
from tidemq.formats.msgid import decode_offset_msg_id, encode_offset_msg_id
from tidemq.formats.record import HostAddr


def test_golden_ipv4() -> None:
    host = HostAddr(bytes([10, 0, 0, 1]), 10911)
    raw = b"".join([
        bytes([10, 0, 0, 1]),        # store host IPv4
        struct.pack(">i", 10911),    # store host port
        struct.pack(">q", 1234),     # physical offset
    ])
    msg_id = encode_offset_msg_id(host, 1234)
    assert msg_id == raw.hex().upper() == "0A00000100002A9F00000000000004D2"
    assert len(msg_id) == 32
    assert decode_offset_msg_id(msg_id) == (host, 1234)
    assert decode_offset_msg_id(msg_id.lower()) == (host, 1234)


def test_golden_ipv6() -> None:
    host = HostAddr(bytes(15) + b"\x01", 9876)
    msg_id = encode_offset_msg_id(host, 2**40)
    assert msg_id == (bytes(15) + b"\x01" + struct.pack(">iq", 9876, 2**40)).hex().upper()
    assert len(msg_id) == 56
    assert decode_offset_msg_id(msg_id) == (host, 2**40)


hosts = st.builds(HostAddr, st.one_of(st.binary(min_size=4, max_size=4),
                                      st.binary(min_size=16, max_size=16)),
                  st.integers(-2**31, 2**31 - 1))


@settings(deadline=None, max_examples=200)
@given(hosts, st.integers(-2**63, 2**63 - 1))
def test_round_trip(host: HostAddr, phys: int) -> None:
    msg_id = encode_offset_msg_id(host, phys)
    assert msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == (host, phys)


@pytest.mark.parametrize("bad", ["", "ABC", "G" * 32, "0" * 31, "0" * 57, "é" * 32, "0x" * 16])
def test_bad_ids_are_corrupt(bad: str) -> None:
    with pytest.raises(CorruptRecord):
        decode_offset_msg_id(bad)


@settings(deadline=None, max_examples=200)
@given(st.one_of(st.text(max_size=60), st.text(min_size=32, max_size=32),
                 st.text(alphabet="0123456789abcdefABCDEF \n", min_size=56, max_size=56)))
def test_garbage_raises_only_corrupt_record(text: str) -> None:
    try:
        host, _ = decode_offset_msg_id(text)
    except CorruptRecord:
        return
    assert len(host.ip) in (4, 16)

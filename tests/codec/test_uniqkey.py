"""UNIQ_KEY generation (remoting.md §3.4)."""

from __future__ import annotations

import datetime
import struct

import pytest

from tidemq.codec.uniqkey import UniqKeyGenerator, parse_uniq_key

SEP_1_2024 = int(datetime.datetime(2024, 9, 1, tzinfo=datetime.UTC).timestamp() * 1000)


def test_layout() -> None:
    gen = UniqKeyGenerator("10.0.0.1", 0x1_04D2, 0xDEADBEEF)
    key = gen.next_key(SEP_1_2024 + 1234)
    expected = (
        (
            bytes([10, 0, 0, 1])  # client IP
            + struct.pack(">H", 0x04D2)  # pid, low 16 bits
            + struct.pack(">I", 0xDEADBEEF)  # per-process hash
            + struct.pack(">I", 1234)  # ms since the start of the month
            + struct.pack(">H", 0)  # counter
        )
        .hex()
        .upper()
    )
    assert key == expected and len(key) == 32
    assert parse_uniq_key(key) == (bytes([10, 0, 0, 1]), 0x04D2, 0xDEADBEEF, 1234, 0)


def test_counter_and_month_rollover() -> None:
    gen = UniqKeyGenerator(bytes(4), 1, 2, counter_start=0xFFFF)
    last_of_aug = SEP_1_2024 - 1
    a = parse_uniq_key(gen.next_key(last_of_aug))
    b = parse_uniq_key(gen.next_key(SEP_1_2024))
    c = parse_uniq_key(gen.next_key(last_of_aug))  # clock stepped back across the boundary
    assert a.counter == 0xFFFF and b.counter == 0 and c.counter == 1
    assert b.month_ms == 0
    assert a.month_ms == c.month_ms == (31 * 86_400_000 - 1) & 0xFFFFFFFF


def test_keys_are_unique_and_ipv6_is_longer() -> None:
    gen = UniqKeyGenerator("::1", 7)
    keys = {gen.next_key(SEP_1_2024) for _ in range(1000)}
    assert len(keys) == 1000
    assert all(len(k) == 56 for k in keys)
    assert parse_uniq_key(next(iter(keys))).ip == bytes(15) + b"\x01"


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        UniqKeyGenerator(b"\x01\x02", 1)
    with pytest.raises(ValueError):
        parse_uniq_key("ABCD")

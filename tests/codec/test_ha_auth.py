"""The HA authentication frame: its layout, its opening of a connection split anywhere,
its signature over every byte before it, and a decoder that meets any bytes with a
frame, a plain report, a wait or a protocol error."""

from __future__ import annotations

import hashlib
import hmac
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec.ha import ReportDecoder, encode_report
from tidemq.codec.ha_auth import MAGIC, MAX_LENGTH, AuthFrame, OpeningDecoder, encode_auth
from tidemq.codec.signature import SigningKey
from tidemq.errors import LocalProtocolError, RemoteProtocolError
from tidemq.net.tls import TlsMode
from tidemq.net.tls_listener import TLS_HANDSHAKE_BYTE, Admission, admit

KEY = SigningKey("secret")
texts = st.text(max_size=60)
keys = st.text(min_size=1, max_size=60)
int64 = st.integers(-(2**63), 2**63 - 1)
nonces = st.binary(min_size=8, max_size=8)


def _frame(access_key: str = "root", *, key: SigningKey = KEY, timestamp_ms: int = 1,
           nonce: bytes = bytes(8), broker_name: str = "broker-a", broker_id: int = 1) -> bytes:
    return encode_auth(access_key, key, timestamp_ms=timestamp_ms, nonce=nonce,
                       broker_name=broker_name, broker_id=broker_id)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return out


def _open(parts: list[bytes]) -> tuple[AuthFrame | None, bytes]:
    dec = OpeningDecoder()
    for i, part in enumerate(parts):
        opened = dec.receive(part)
        if opened is not None:
            return opened.frame, opened.rest + b"".join(parts[i + 1:])
    raise AssertionError("the opening never completed")


def test_layout() -> None:
    frame = _frame("ak", timestamp_ms=0x0102030405060708, nonce=b"NNNNNNNN",
                   broker_name="bn", broker_id=7)
    signed = (struct.pack(">IH", MAGIC, 53) + b"\x01" + bytes(range(1, 9)) + b"NNNNNNNN"
              + struct.pack(">q", 7) + b"\x00\x02ak" + b"\x00\x02bn")
    assert frame == signed + hmac.new(b"secret", signed, hashlib.sha1).digest()
    assert len(frame) == 6 + 53


def test_the_first_byte_is_neither_a_report_nor_tls() -> None:
    first = _frame()[0]
    assert first & 0x80 and first != TLS_HANDSHAKE_BYTE
    assert all(encode_report(o)[0] < 0x80 for o in (0, 1, 2**63 - 1))
    # a TLS port still tells a plain replica from a TLS one by it
    assert admit(first, TlsMode.PERMISSIVE) is Admission.PLAIN
    assert admit(first, TlsMode.ENFORCING) is Admission.REFUSE


def test_what_cannot_be_encoded() -> None:
    with pytest.raises(LocalProtocolError):
        _frame("")
    with pytest.raises(LocalProtocolError):
        _frame(nonce=b"short")
    with pytest.raises(LocalProtocolError):
        _frame("k" * MAX_LENGTH)
    with pytest.raises(LocalProtocolError):
        _frame(broker_id=2**63)


@given(keys, texts, int64, int64, nonces, st.lists(st.integers(0, 2**63 - 1), max_size=5),
       st.lists(st.integers(0, 500), max_size=6))
def test_a_frame_and_its_reports_survive_any_split(
        access_key: str, name: str, ts: int, broker_id: int, nonce: bytes,
        offsets: list[int], cuts: list[int]) -> None:
    frame = _frame(access_key, timestamp_ms=ts, nonce=nonce, broker_name=name,
                   broker_id=broker_id)
    reports = b"".join(map(encode_report, offsets))
    got, rest = _open(_cut(frame + reports, cuts))
    assert got is not None and got.verify(KEY) and not got.verify(SigningKey("other"))
    assert (got.access_key, got.broker_name, got.timestamp_ms, got.broker_id, got.nonce) == (
        access_key, name, ts, broker_id, nonce)
    assert rest == reports
    assert ReportDecoder().receive(rest) == (offsets[-1] if offsets else None)


@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=5),
       st.lists(st.integers(0, 100), max_size=4))
def test_a_plain_replica_opens_with_its_report(offsets: list[int], cuts: list[int]) -> None:
    reports = b"".join(map(encode_report, offsets))
    parts = [p for p in _cut(reports, cuts) if p]
    assert _open(parts) == (None, reports)


@given(st.integers(0, 59), st.integers(1, 255))
def test_every_signed_byte_counts(at: int, flip: int) -> None:
    """A byte changed anywhere: the frame no longer decodes, or its signature fails."""
    frame = bytearray(_frame())
    frame[at] ^= flip
    try:
        got, _ = _open([bytes(frame)])
    except (RemoteProtocolError, AssertionError):  # refused, or waits for more bytes
        return
    assert got is None or not got.verify(KEY)


@given(st.binary(max_size=200), st.lists(st.integers(0, 300), max_size=5))
def test_fuzz_any_bytes_after_the_magic(tail: bytes, cuts: list[int]) -> None:
    """Whatever follows the magic, the decoder waits, opens or raises a protocol error."""
    wire = struct.pack(">I", MAGIC) + tail
    dec = OpeningDecoder()
    try:
        for part in _cut(wire, cuts):
            opened = dec.receive(part)
            if opened is not None:
                assert opened.frame is not None
                return
    except RemoteProtocolError:
        return


@given(st.binary(min_size=1, max_size=64))
def test_fuzz_any_opening(wire: bytes) -> None:
    try:
        opened = OpeningDecoder().receive(wire)
    except RemoteProtocolError:
        return
    if opened is not None and opened.frame is None:
        assert wire[0] < 0x80 and opened.rest == wire


def test_what_is_refused() -> None:
    frame = _frame()
    for wire, why in [
            (b"\xff" + frame[1:], "neither"),
            (frame[:4] + struct.pack(">H", MAX_LENGTH + 1) + frame[6:], "length"),
            (frame[:4] + struct.pack(">H", 10) + frame[6:], "length"),
            (frame[:6] + b"\x02" + frame[7:], "version 2"),
            (frame[:31] + b"\x00\x00" + frame[33:], "ends before|overruns|more than|empty"),
            (frame[:31] + b"\xff\xff" + frame[33:], "overruns"),
            (frame[:33] + b"\xff\xfe" + frame[35:], "UTF-8")]:
        with pytest.raises(RemoteProtocolError, match=why):
            OpeningDecoder().receive(wire)
    assert OpeningDecoder().receive(frame[:3]) is None  # the start of a magic: wait
    with pytest.raises(RemoteProtocolError, match="neither"):
        OpeningDecoder().receive(b"\xfe\x00")

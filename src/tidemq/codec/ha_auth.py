"""TideMQ's HA authentication frame: a replica proves who it is before its first offset
report. Sans-IO. Upstream RocketMQ has no such frame.

A replica whose broker has credentials (``accessKey``/``secretKey``, or ACL 2.0's
``innerClientAuthenticationCredentials``) writes this frame first on its HA connection,
then its offset reports (:mod:`tidemq.codec.ha`) as usual. All integers are big-endian:

======  ====  ============  ==========================================================
offset  size  field         meaning
======  ====  ============  ==========================================================
0       4     magic         ``0xFE544841``: the top bit is set, so no offset report (a
                            non-negative int64) starts like it, and the first byte is
                            not a TLS handshake's ``0x16``
4       2     length        ``L``: the bytes that follow, 50 to :data:`MAX_LENGTH`
6       1     version       1
7       8     timestamp     int64, ms since the epoch, on the replica's clock
15      8     nonce         random bytes: no two frames are alike
23      8     brokerId      int64, the replica's ``brokerId``
31      2     keyLength     ``K``
33      K     accessKey     UTF-8, 1 byte or more
33+K    2     nameLength    ``N``
35+K    N     brokerName    UTF-8
35+K+N  20    signature     HMAC-SHA1, keyed with the secret key, over bytes
                            ``[0, 35+K+N)``: everything before it
======  ====  ============  ==========================================================

:func:`encode_auth` builds a frame; :class:`OpeningDecoder` takes a connection's first
bytes and says whether it opened with a frame (:class:`AuthFrame`) or with a plain
offset report, and hands back the bytes after the frame for the report decoder.
A frame whose magic, length or version is wrong, or whose fields do not fill its
length exactly, is :class:`~tidemq.errors.RemoteProtocolError`. The signature is
checked by :meth:`AuthFrame.verify` (the master knows the key; this module does not
look it up). A frame arrives before any report, in plain text on a port without TLS: it
proves the sender holds the secret key, but it does not hide the log that follows.
"""

from __future__ import annotations

import dataclasses
import hmac
import struct

from tidemq.codec.signature import SigningKey
from tidemq.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["MAGIC", "MAX_LENGTH", "NONCE_SIZE", "SIGNATURE_SIZE", "VERSION", "AuthFrame",
           "Opening", "OpeningDecoder", "encode_auth"]

MAGIC = 0xFE544841
VERSION = 1
NONCE_SIZE = 8
SIGNATURE_SIZE = 20
#: The largest ``length`` accepted: an access key and a broker name of a few hundred bytes.
MAX_LENGTH = 1024

_MAGIC = struct.Struct(">I")
_HEAD = struct.Struct(">IH")  # magic, length
_FIXED = struct.Struct(">Bq8sq")  # version, timestamp, nonce, brokerId
_U16 = struct.Struct(">H")
_HEAD_SIZE = _HEAD.size
_MIN_LENGTH = _FIXED.size + 2 + 1 + 2 + SIGNATURE_SIZE
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


@dataclasses.dataclass(frozen=True, slots=True)
class AuthFrame:
    """One decoded frame. ``signed`` is the bytes the signature covers."""

    access_key: str
    timestamp_ms: int
    nonce: bytes
    broker_name: str
    broker_id: int
    signed: bytes = dataclasses.field(repr=False)
    signature: bytes = dataclasses.field(repr=False)

    def verify(self, key: SigningKey) -> bool:
        """Whether the signature is this key's."""
        return hmac.compare_digest(key.mac(self.signed), self.signature)


def encode_auth(access_key: str, key: SigningKey, *, timestamp_ms: int, nonce: bytes,
                broker_name: str, broker_id: int) -> bytes:
    """A signed frame (module table); ``key`` is the secret key of ``access_key``."""
    ak, name = access_key.encode(), broker_name.encode()
    if not ak:
        raise LocalProtocolError("an HA authentication frame needs an access key")
    if len(nonce) != NONCE_SIZE:
        raise LocalProtocolError(f"the nonce is {NONCE_SIZE} bytes, not {len(nonce)}")
    if not (_I64_MIN <= timestamp_ms <= _I64_MAX and _I64_MIN <= broker_id <= _I64_MAX):
        raise LocalProtocolError("timestamp or brokerId out of range for an int64")
    length = _FIXED.size + 2 + len(ak) + 2 + len(name) + SIGNATURE_SIZE
    if length > MAX_LENGTH:
        raise LocalProtocolError(f"access key and broker name take {length} bytes; an HA "
                                 f"authentication frame holds {MAX_LENGTH}")
    signed = b"".join((_HEAD.pack(MAGIC, length),
                       _FIXED.pack(VERSION, timestamp_ms, nonce, broker_id),
                       _U16.pack(len(ak)), ak, _U16.pack(len(name)), name))
    return signed + key.mac(signed)


def _decode(frame: bytes) -> AuthFrame:
    """A whole frame, head included (its length already checked)."""
    at = _HEAD_SIZE
    version, timestamp, nonce, broker_id = _FIXED.unpack_from(frame, at)
    if version != VERSION:
        raise RemoteProtocolError(f"HA authentication frame of version {version}; this "
                                  f"broker reads version {VERSION}")
    at += _FIXED.size
    end = len(frame) - SIGNATURE_SIZE
    fields = []
    for what in ("access key", "broker name"):
        if at + 2 > end:
            raise RemoteProtocolError(f"HA authentication frame ends before its {what}")
        (size,) = _U16.unpack_from(frame, at)
        at += 2
        if at + size > end:
            raise RemoteProtocolError(f"HA authentication frame: its {what} of {size} "
                                      "bytes overruns the frame")
        try:
            fields.append(frame[at:at + size].decode())
        except UnicodeDecodeError:
            raise RemoteProtocolError(f"HA authentication frame: its {what} is not "
                                      "UTF-8") from None
        at += size
    if at != end:
        raise RemoteProtocolError(f"HA authentication frame has {end - at} bytes more than "
                                  "its fields")
    if not fields[0]:
        raise RemoteProtocolError("HA authentication frame with an empty access key")
    return AuthFrame(access_key=fields[0], timestamp_ms=timestamp, nonce=nonce,
                     broker_name=fields[1], broker_id=broker_id, signed=frame[:end],
                     signature=frame[end:])


@dataclasses.dataclass(frozen=True, slots=True)
class Opening:
    """How a connection opened: with ``frame``, or (``None``) with a plain report;
    ``rest`` is the bytes that followed, for the report decoder."""

    frame: AuthFrame | None
    rest: bytes


class OpeningDecoder:
    """The master's side: a connection's first bytes, until it is known how it opened.

    :meth:`receive` returns ``None`` while that is not known yet (part of a frame), then
    an :class:`Opening`; it is not to be called after that."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def receive(self, data: bytes | bytearray | memoryview) -> Opening | None:
        buf = self._buf
        buf += data
        if not buf:
            return None
        if not buf[0] & 0x80:  # a report: a non-negative int64
            return Opening(None, bytes(buf))
        if len(buf) < _HEAD_SIZE:
            if bytes(buf[:4]) != _MAGIC.pack(MAGIC)[:len(buf)]:
                raise RemoteProtocolError("HA connection opened with neither an offset "
                                          "report nor an authentication frame")
            return None
        magic, length = _HEAD.unpack_from(buf)
        if magic != MAGIC:
            raise RemoteProtocolError("HA connection opened with neither an offset report "
                                      "nor an authentication frame")
        if not _MIN_LENGTH <= length <= MAX_LENGTH:
            raise RemoteProtocolError(f"HA authentication frame of length {length}, not "
                                      f"{_MIN_LENGTH} to {MAX_LENGTH}")
        end = _HEAD_SIZE + length
        if len(buf) < end:
            return None
        return Opening(_decode(bytes(buf[:end])), bytes(buf[end:]))

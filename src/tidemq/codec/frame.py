"""Remoting frames: length-prefixed commands (specs/remoting.md §1.2). Sans-IO.

======  ====  ===========  ==================================================
offset  size  field        meaning
======  ====  ===========  ==================================================
0       4     length       bytes after this field: 4 + H + B
4       4     headerWord   high byte: serialization (0 JSON, 1 ROCKETMQ);
                           low 24 bits: H, the header length
8       H     header       JSON text or ROCKETMQ binary (``tidemq.codec.header``)
8+H     B     body         opaque bytes, B = length - 4 - H
======  ====  ===========  ==================================================

:class:`FrameDecoder` takes bytes with :meth:`~FrameDecoder.receive_data` and hands back
commands from :meth:`~FrameDecoder.next_command`, or ``None`` when it needs more data.
It rejects a length above ``max_frame_size`` before allocating anything. Garbage raises
:class:`~tidemq.errors.RemoteProtocolError` (the peer broke the protocol).

:func:`encode_command` returns a list of buffers for ``writelines``: the frame head, then
the body parts untouched, so stored records go out without being copied or joined.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from tidemq.codec.command import RemotingCommand, SerializeType
from tidemq.codec.header import decode_header, encode_header
from tidemq.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder", "encode_command", "frame_bytes"]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_LEN_WORD = struct.Struct(">ii")
_INT = struct.Struct(">i")

Buffer = bytes | bytearray | memoryview


class FrameDecoder:
    """Incremental decoder for one direction of one connection."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0

    def receive_data(self, data: Buffer) -> None:
        """Append bytes read from the peer."""
        if self._pos and self._pos >= len(self._buf) // 2:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as commands."""
        return len(self._buf) - self._pos

    def next_command(self) -> RemotingCommand | None:
        """The next complete command, or ``None`` if more bytes are needed."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        (length,) = _INT.unpack_from(buf, pos)
        if length < 4:
            raise RemoteProtocolError(f"frame length {length} is below the 4-byte minimum")
        if length > self.max_frame_size:
            raise RemoteProtocolError(
                f"frame length {length} exceeds the maximum of {self.max_frame_size} bytes"
            )
        if len(buf) - pos - 4 < length:
            return None
        (word,) = _INT.unpack_from(buf, pos + 4)
        ser = (word >> 24) & 0xFF
        hlen = word & 0xFFFFFF
        if hlen > length - 4:
            raise RemoteProtocolError(f"header length {hlen} exceeds frame length {length}")
        try:
            stype = SerializeType(ser)
        except ValueError:
            raise RemoteProtocolError(f"unknown serialization type {ser}") from None
        hstart = pos + 8
        header = bytes(buf[hstart : hstart + hlen])
        body = bytes(buf[hstart + hlen : pos + 4 + length])
        self._pos = pos + 4 + length
        cmd = decode_header(header, stype)
        cmd.body = body
        return cmd


def encode_command(cmd: RemotingCommand) -> list[Buffer]:
    """Encode ``cmd`` as a list of buffers: the head (length, word, header), then body parts."""
    header = encode_header(cmd)
    parts: Sequence[Buffer] = cmd.body_parts if cmd.body_parts is not None else (cmd.body,)
    body_len = sum(len(p) for p in parts)
    if len(header) > 0xFFFFFF:
        raise LocalProtocolError(f"header of {len(header)} bytes does not fit 24 bits")
    length = 4 + len(header) + body_len
    if length > 0x7FFFFFFF:
        raise LocalProtocolError(f"frame of {length} bytes does not fit the 32-bit length field")
    head = _LEN_WORD.pack(length, (int(cmd.serialize_type) << 24) | len(header)) + header
    out: list[Buffer] = [head]
    out.extend(p for p in parts if len(p))
    return out


def frame_bytes(cmd: RemotingCommand) -> bytes:
    """The whole frame as one ``bytes`` object (tests, batch-protocol children)."""
    return b"".join(encode_command(cmd))

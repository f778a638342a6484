"""Remoting frames: length-prefixed commands (docs/reference/remoting.md §1.2). Sans-IO.

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
Its buffer grows with the bytes that arrive, never with the length a frame announces:
a peer that announces 16 MiB and sends ten bytes costs ten bytes. Garbage raises
:class:`~tidemq.errors.RemoteProtocolError` (the peer broke the protocol).

A request whose code is one of the decoder's ``lent`` codes gets its body as a view of
the receive buffer (a ``memoryview``) instead of a copy: the buffer is reused by the next
receive (:meth:`~FrameDecoder.receive_data`, :meth:`~FrameDecoder.get_buffer`), so such a
body may be read only until then -- the handler of such a request reads it while it runs
and copies what it keeps. Every other frame, and every response, gets ``bytes``.

A frame longer than ``max_frame_size`` raises :class:`FrameTooLarge` once its header
has arrived, carrying the decoded header (code, opaque, flags) so the caller can answer
it; the decoder then drops the rest of that frame as it arrives, without keeping it, and
goes on with the next one. A header too long to wait for (over
``max_oversized_header``) makes the error carry no command.

:func:`encode_command` returns a list of buffers for ``writelines``: the frame head, then
the body parts untouched, so stored records go out without being copied or joined. Given
a ``limit``, it refuses a longer frame with :class:`FrameTooLargeToSend` before anything
is written.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Sequence
from typing import cast

from tidemq.codec.command import FLAG_RESPONSE, PlainText, RemotingCommand, SerializeType
from tidemq.codec.header import decode_header, decode_json_header, encode_header
from tidemq.errors import LocalProtocolError, RemoteProtocolError
from tidemq.formats.record.native import compiled

__all__ = [
    "DEFAULT_KEEP_CAPACITY",
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_OVERSIZED_HEADER",
    "FrameDecoder",
    "FrameTooLarge",
    "FrameTooLargeToSend",
    "encode_command",
    "frame_bytes",
]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
#: The longest header of an oversized frame the decoder waits for, to answer it.
DEFAULT_MAX_OVERSIZED_HEADER = 64 * 1024
#: A decoder's receive buffer keeps at most this size between frames.
DEFAULT_KEEP_CAPACITY = 4 * 1024 * 1024
#: The size of a new receive buffer.
_MIN_READ = 64 * 1024
#: The least free space :meth:`FrameDecoder.get_buffer` offers.
_MIN_FREE = 16 * 1024

_LEN_WORD = struct.Struct(">ii")
_INT = struct.Struct(">i")
_SERIALIZE_TYPES: dict[int, SerializeType] = {t.value: t for t in SerializeType}
_ROCKETMQ = SerializeType.ROCKETMQ
_JSON_TYPE = SerializeType.JSON.value
#: The compiled JSON header writer, which also writes a frame's head (its twin: the
#: general path of :func:`encode_command`).
_compiled_head = cast("Callable[..., bytes | None] | None", compiled("json_header"))

Buffer = bytes | bytearray | memoryview


#: How the first four bytes of another protocol's text begin: HTTP's answers and requests.
_HTTP_WORDS = frozenset({"HTTP", "GET ", "POST", "PUT ", "HEAD"})


def _text_protocol(size: int) -> str:
    """What a length field whose four bytes are printable text says about the peer: it
    speaks another protocol (most often HTTP: the port of a web server), not
    remoting; ``""`` when the bytes are not text."""
    head = (size & 0xFFFFFFFF).to_bytes(4, "big")
    if not all(0x20 <= b < 0x7F for b in head):
        return ""
    word = head.decode("ascii")
    if word in _HTTP_WORDS:
        return (f": its first bytes read {word!r}: the peer speaks HTTP, not RocketMQ "
                "remoting (a web server's port, such as the console's or a metrics port?)")
    return f": its first bytes read {word!r}: the peer speaks text, not RocketMQ remoting"


class FrameTooLarge(RemoteProtocolError):
    """The peer sent a frame of ``size`` bytes (the length field's value) over ``limit``.

    ``command`` is the frame's decoded header (its body left out) when the header could
    be read, so the request can be answered; ``None`` otherwise. The decoder that raised
    it skips the rest of the frame and can go on being used.
    """

    def __init__(self, size: int, limit: int, command: RemotingCommand | None) -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum of {limit} bytes"
                         f"{_text_protocol(size)}")
        self.size = size
        self.limit = limit
        self.command = command


class FrameTooLargeToSend(LocalProtocolError):
    """A command would make a frame of ``size`` bytes, over the ``limit`` a peer accepts."""

    def __init__(self, size: int, limit: int, code: int) -> None:
        super().__init__(f"request code {code}: a frame of {size} bytes exceeds the maximum "
                         f"of {limit} bytes")
        self.size = size
        self.limit = limit
        self.code = code


class FrameDecoder:
    """Incremental decoder for one direction of one connection.

    Bytes come in either way: :meth:`receive_data` copies a chunk in, or -- for a
    transport that reads into a caller's buffer (``asyncio.BufferedProtocol``,
    ``socket.recv_into``) -- :meth:`get_buffer` hands out the free space and
    :meth:`buffer_updated` says how much of it was filled. Bytes land in one reused
    buffer, and each command's header and body are copied out of it once (a lent body
    not at all): no per-read allocation. The buffer doubles when it is full, up to what
    the frame being received needs (so memory follows the bytes received, at most twice
    them); between frames it keeps its size up to ``keep_capacity`` bytes, so frames up
    to that size are read in place; a larger one is dropped once emptied.

    ``lent``: the request codes whose bodies are lent rather than copied (module
    docstring); the collection is read at each frame, so its owner may add codes later.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 keep_capacity: int = DEFAULT_KEEP_CAPACITY,
                 max_oversized_header: int = DEFAULT_MAX_OVERSIZED_HEADER,
                 lent: Collection[int] = ()) -> None:
        self.max_frame_size = max_frame_size
        self.lent = lent
        self.keep_capacity = keep_capacity
        self.max_oversized_header = max_oversized_header
        self._buf = bytearray(_MIN_READ)
        self._view = memoryview(self._buf)
        self._pos = 0  # the first byte not returned as a command
        self._end = 0  # the end of the bytes received
        self._want = 0  # bytes from _pos the frame begun there needs (0: not known)
        self._skip = 0  # bytes of an oversized frame still to drop as they arrive

    def receive_data(self, data: Buffer) -> None:
        """Append bytes read from the peer."""
        n = len(data)
        start = self._reserve(n)
        self._view[start : start + n] = data
        self._end = start + n

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Free space to read into (at least ``sizehint`` bytes, or some KiB when it is
        -1 or 0); then call :meth:`buffer_updated`."""
        start = self._reserve(max(sizehint, _MIN_FREE))
        return self._view[start:]

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the last :meth:`get_buffer` view."""
        self._end += nbytes

    def _reserve(self, n: int) -> int:
        """Make room for ``n`` more bytes; returns where they go. The buffer is replaced,
        never resized (a view of it may still be held by the transport), and compacted
        when that leaves enough room."""
        pos, end = self._pos, self._end
        pending = end - pos
        need = pending + n  # bytes from ``pos`` that must fit
        cap = len(self._buf)
        if not pending:
            self._pos = self._end = 0
            if need > cap:
                self._replace(max(need, min(2 * cap, self.keep_capacity)), 0)
            elif cap > self.keep_capacity >= need:
                self._replace(max(need, _MIN_READ), 0)
            return 0
        if pos + need <= cap:
            return end
        if need <= cap:  # moving the pending bytes to the start makes room
            self._buf[0:pending] = self._view[pos:end]
            self._pos, self._end = 0, pending
        else:  # double, but not past the frame being received
            grown = 2 * cap if not self._want else min(2 * cap, self._want)
            self._replace(max(need, grown), pending)
        return pending

    def _replace(self, size: int, pending: int) -> None:
        buf = bytearray(size)
        buf[0:pending] = self._view[self._pos : self._pos + pending]
        self._buf, self._view = buf, memoryview(buf)
        self._pos, self._end = 0, pending

    def clear(self) -> None:
        """Drop every byte received and not returned yet, and a grown buffer."""
        self._pos = self._end = self._want = self._skip = 0
        if len(self._buf) > _MIN_READ:
            self._replace(_MIN_READ, 0)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as commands (after :meth:`next_command`
        returned ``None``: the part of a frame received so far)."""
        return self._end - self._pos

    @property
    def capacity(self) -> int:
        """The size of the receive buffer."""
        return len(self._buf)

    @property
    def spare(self) -> int:
        """Buffer bytes kept beyond the first buffer's size while no frame is pending
        (kept for the next large frame; :meth:`release` gives them back)."""
        return 0 if self._end != self._pos else len(self._buf) - _MIN_READ

    def release(self) -> None:
        """Drop a grown buffer while no frame is pending (the next large frame grows it
        again)."""
        if self._end == self._pos and len(self._buf) > _MIN_READ:
            self._replace(_MIN_READ, 0)

    def next_command(self) -> RemotingCommand | None:
        """The next complete command, or ``None`` if more bytes are needed.

        Raises :class:`FrameTooLarge` for an oversized frame (the decoder stays usable)
        and :class:`~tidemq.errors.RemoteProtocolError` for garbage (it does not)."""
        if self._skip:
            self._drop()
            if self._skip:
                return None
        pos, end = self._pos, self._end
        if end - pos < 8:  # the length and header word (a shorter frame fails below)
            if end - pos < 4:
                return None
            (length,) = _INT.unpack_from(self._buf, pos)
            word = 0
        else:
            length, word = _LEN_WORD.unpack_from(self._buf, pos)
        if length < 4:
            raise RemoteProtocolError(f"frame length {length} is below the 4-byte minimum")
        if length > self.max_frame_size:
            self._oversized(length)
            return None
        stop = pos + 4 + length
        if end < stop:
            self._want = 4 + length
            return None
        hlen = word & 0xFFFFFF
        if hlen > length - 4:
            raise RemoteProtocolError(f"header length {hlen} exceeds frame length {length}")
        hstart = pos + 8
        hend = hstart + hlen
        view = self._view
        if word >> 24 == _JSON_TYPE:  # decoded where it was received
            self._pos = stop
            self._want = 0
            cmd = decode_json_header(view[hstart:hend])
        else:
            stype = _SERIALIZE_TYPES.get(word >> 24 & 0xFF)
            if stype is None:
                raise RemoteProtocolError(f"unknown serialization type {word >> 24 & 0xFF}")
            self._pos = stop
            self._want = 0
            cmd = decode_header(bytes(view[hstart:hend]), stype)
        if cmd.code in self.lent and not cmd.flag & FLAG_RESPONSE:
            cmd.body = view[hend:stop]
        else:
            cmd.body = bytes(view[hend:stop])
        return cmd

    def _oversized(self, length: int) -> None:
        """Wait for the header of an oversized frame, then raise :class:`FrameTooLarge`
        with it and start skipping the rest of the frame."""
        pos, end = self._pos, self._end
        self._want = 0
        if end - pos < 8:
            return None
        (word,) = _INT.unpack_from(self._buf, pos + 4)
        hlen = word & 0xFFFFFF
        if hlen > length - 4 or hlen > self.max_oversized_header:
            raise FrameTooLarge(length, self.max_frame_size, None)
        if end - pos < 8 + hlen:
            return None
        try:
            stype = SerializeType((word >> 24) & 0xFF)
        except ValueError:
            raise FrameTooLarge(length, self.max_frame_size, None) from None
        header = bytes(self._view[pos + 8 : pos + 8 + hlen])
        self._pos = pos + 8 + hlen
        self._skip = length - 4 - hlen
        self._drop()
        try:
            cmd = decode_header(header, stype)
        except RemoteProtocolError as exc:
            raise FrameTooLarge(length, self.max_frame_size, None) from exc
        raise FrameTooLarge(length, self.max_frame_size, cmd)

    def _drop(self) -> None:
        """Drop the bytes of an oversized frame received so far."""
        drop = min(self._skip, self._end - self._pos)
        self._pos += drop
        self._skip -= drop


def encode_command(cmd: RemotingCommand, limit: int | None = None) -> list[Buffer]:
    """Encode ``cmd`` as a list of buffers: the head (length, word, header), then body parts.

    A frame whose length field would exceed ``limit`` raises :class:`FrameTooLargeToSend`.
    The head of a JSON command with one body is written by one compiled call where it
    can be: the bytes the general path below writes.
    """
    parts: Sequence[Buffer] | None = cmd.body_parts
    if parts is None and _compiled_head is not None and cmd.serialize_type is not _ROCKETMQ:
        body = cmd.body
        blen = len(body)
        head = _compiled_head(cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version,
                              cmd.remark, cmd.ext_fields, PlainText, blen)
        if head is not None and (limit is None or len(head) - 4 + blen <= limit):
            return [head, body] if blen else [head]
    header = encode_header(cmd)
    hlen = len(header)
    body_len = len(cmd.body) if parts is None else sum(map(len, parts))
    if hlen > 0xFFFFFF:
        raise LocalProtocolError(f"header of {hlen} bytes does not fit 24 bits")
    length = 4 + hlen + body_len
    if limit is not None and length > limit:
        raise FrameTooLargeToSend(length, limit, cmd.code)
    if length > 0x7FFFFFFF:
        raise LocalProtocolError(f"frame of {length} bytes does not fit the 32-bit length field")
    head = _LEN_WORD.pack(length, (int(cmd.serialize_type) << 24) | hlen) + header
    if parts is None:
        return [head, cmd.body] if body_len else [head]
    out: list[Buffer] = [head]
    out.extend(filter(len, parts))
    return out


def frame_bytes(cmd: RemotingCommand) -> bytes:
    """The whole frame as one ``bytes`` object (tests, batch-protocol children)."""
    return b"".join(encode_command(cmd))

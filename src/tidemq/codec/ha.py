"""RocketMQ's HA transfer: a replica's offset reports and a master's log frames. Sans-IO.

The replica connects to the master's HA port (``haListenPort``) and the two sides write
raw bytes, no remoting frames. The replica writes **offset reports**, the master
**transfer frames**:

Offset report (replica to master), on connecting, after each receipt and every
``haSendHeartbeatInterval`` ms:

======  ====  ==========  =====================================================
offset  size  field       meaning
======  ====  ==========  =====================================================
0       8     maxOffset   int64, big-endian: the replica's commit log ends here
======  ====  ==========  =====================================================

Transfer frame (master to replica), in commit-log order from the first report:

======  ====  ==========  =====================================================
offset  size  field       meaning
======  ====  ==========  =====================================================
0       8     phyOffset   int64, big-endian: where ``data`` starts in the log
8       4     bodySize    int32, big-endian: ``B``, 0 for a heartbeat
12      B     data        the master's commit-log bytes ``[phyOffset, +B)``
======  ====  ==========  =====================================================

:class:`ReportDecoder` and :class:`TransferDecoder` take bytes as they arrive and hand
back what is complete; :class:`TransferStream` hands back the pieces of frame bodies a
read holds, as views of that read, without waiting for whole frames (a replica writes
them into its log as they come). A frame larger than the decoder's limit or a negative
offset is :class:`~tidemq.errors.RemoteProtocolError` (the peer broke the protocol),
raised before its body is buffered or handed on.
"""

from __future__ import annotations

import struct

from tidemq.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "FRAME_HEADER_SIZE",
    "REPORT_SIZE",
    "ReportDecoder",
    "TransferDecoder",
    "TransferStream",
    "encode_frame_header",
    "encode_report",
]

REPORT_SIZE = 8
FRAME_HEADER_SIZE = 12
_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
_MAX_OFFSET = 2**63 - 1


def encode_report(offset: int) -> bytes:
    """A replica's offset report."""
    if not 0 <= offset <= _MAX_OFFSET:
        raise LocalProtocolError(f"offset {offset} out of range for an HA report")
    return _REPORT.pack(offset)


def encode_frame_header(offset: int, size: int) -> bytes:
    """The 12-byte head of a transfer frame carrying ``size`` bytes from ``offset``."""
    if not 0 <= offset <= _MAX_OFFSET:
        raise LocalProtocolError(f"offset {offset} out of range for an HA frame")
    if not 0 <= size <= 0x7FFFFFFF:
        raise LocalProtocolError(f"size {size} out of range for an HA frame")
    return _HEADER.pack(offset, size)


class ReportDecoder:
    """The master's side: offset reports from one replica."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def receive(self, data: bytes | bytearray | memoryview) -> int | None:
        """Take ``data``; the newest complete report in it, or ``None`` if none completed
        (earlier reports in the same data are superseded by the newest)."""
        buf = self._buf
        buf += data
        whole = len(buf) - len(buf) % REPORT_SIZE
        if not whole:
            return None
        offset: int = _REPORT.unpack_from(buf, whole - REPORT_SIZE)[0]
        for at in range(0, whole - REPORT_SIZE, REPORT_SIZE):
            if _REPORT.unpack_from(buf, at)[0] < 0:
                offset = -1
        del buf[:whole]
        if offset < 0:
            raise RemoteProtocolError("HA offset report is negative")
        return offset


def _checked_head(offset: int, size: int, max_body: int) -> None:
    if offset < 0:
        raise RemoteProtocolError(f"HA frame offset {offset} is negative")
    if size < 0 or size > max_body:
        raise RemoteProtocolError(
            f"HA frame of {size} bytes (at offset {offset}) exceeds {max_body}"
            if size > 0 else f"HA frame size {size} is negative")


class TransferDecoder:
    """The replica's side: transfer frames from the master.

    :meth:`receive` takes bytes, :meth:`next_frame` returns ``(offset, data)`` for each
    complete frame (``data`` empty for a heartbeat) or ``None``. ``max_body`` bounds a
    frame's ``bodySize``; the buffer never holds more than one frame and its head."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self._buf = bytearray()
        self._start = 0

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._start

    def receive(self, data: bytes | bytearray | memoryview) -> None:
        if self._start:
            del self._buf[: self._start]
            self._start = 0
        self._buf += data

    def next_frame(self) -> tuple[int, bytes] | None:
        buf, at = self._buf, self._start
        if len(buf) - at < FRAME_HEADER_SIZE:
            return None
        offset, size = _HEADER.unpack_from(buf, at)
        _checked_head(offset, size, self.max_body)
        end = at + FRAME_HEADER_SIZE + size
        if len(buf) < end:
            return None
        data = bytes(buf[at + FRAME_HEADER_SIZE : end])
        self._start = end
        return offset, data


class TransferStream:
    """The replica's side, streaming: transfer frames from the master, their bodies handed
    on piece by piece as reads bring them.

    :meth:`feed` takes one read and returns ``(offset, piece)`` for every run of body bytes
    in it: ``piece`` is a view of the read (valid as long as the caller's buffer is) holding
    the master's log bytes from ``offset``; a body cut by the end of a read continues in
    the first piece of the next. Only a frame head cut by a read (under 12 bytes) is
    kept. :attr:`frames` counts the frames completed, heartbeats included."""

    def __init__(self, max_body: int) -> None:
        self.max_body = max_body
        self.frames = 0
        self._head = bytearray()  # the start of a head the previous read cut
        self._offset = 0  # where the next body byte of the current frame goes in the log
        self._left = 0  # body bytes of the current frame still to come

    @property
    def in_frame(self) -> bool:
        """Whether a frame is under way: part of its head or body is still to come."""
        return bool(self._left or self._head)

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, memoryview]]:
        view = data if isinstance(data, memoryview) else memoryview(data)
        out: list[tuple[int, memoryview]] = []
        at, n = 0, len(view)
        head = self._head
        while at < n:
            if self._left:
                take = min(self._left, n - at)
                out.append((self._offset, view[at : at + take]))
                self._offset += take
                self._left -= take
                at += take
                if not self._left:
                    self.frames += 1
                continue
            if head or n - at < FRAME_HEADER_SIZE:
                take = min(FRAME_HEADER_SIZE - len(head), n - at)
                head += view[at : at + take]
                at += take
                if len(head) < FRAME_HEADER_SIZE:
                    break
                offset, size = _HEADER.unpack_from(head)
                head.clear()
            else:
                offset, size = _HEADER.unpack_from(view, at)
                at += FRAME_HEADER_SIZE
            _checked_head(offset, size, self.max_body)
            if size:
                self._offset, self._left = offset, size
            else:
                self.frames += 1  # a heartbeat
        return out

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
back what is complete; a frame larger than the decoder's limit or a negative offset is
:class:`~tidemq.errors.RemoteProtocolError` (the peer broke the protocol), raised before
its body is buffered.
"""

from __future__ import annotations

import struct

from tidemq.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "FRAME_HEADER_SIZE",
    "REPORT_SIZE",
    "ReportDecoder",
    "TransferDecoder",
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
        if offset < 0:
            raise RemoteProtocolError(f"HA frame offset {offset} is negative")
        if size < 0 or size > self.max_body:
            raise RemoteProtocolError(
                f"HA frame of {size} bytes (at offset {offset}) exceeds {self.max_body}"
                if size > 0 else f"HA frame size {size} is negative")
        end = at + FRAME_HEADER_SIZE + size
        if len(buf) < end:
            return None
        data = bytes(buf[at + FRAME_HEADER_SIZE : end])
        self._start = end
        return offset, data

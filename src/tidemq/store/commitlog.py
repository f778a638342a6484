"""CommitLog: the ordered list of segments holding every record. The source of truth.

Records are byte-compatible with RocketMQ (``tidemq.formats.record``). This class owns
the segment files: loading, creating, pre-faulting, reading, flushing, truncating and
deleting them. Writing records into them, rolling to a new one and the sticky write
error on a failed write are the append point's (:mod:`tidemq.store.appender`).

Concurrency: every mutating method expects the caller to hold :attr:`CommitLog.lock`
(the one append lock of the store). Reads take no lock: they only touch bytes below the
written mark, which never move.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from tidemq.errors import StoreReadOnly
from tidemq.store.layout import StoreLayout
from tidemq.store.mapped_file import MappedFile, all_zero
from tidemq.store.threads import NamedThread

__all__ = ["CommitLog"]

log = logging.getLogger(__name__)


class CommitLog:
    """Segments of ``segment_size`` bytes under ``layout.commitlog_dir``."""

    def __init__(self, layout: StoreLayout, segment_size: int, *, preallocate: bool = True,
                 warm_ahead: int = 32 * 1024 * 1024) -> None:
        self.layout = layout
        #: Bytes kept pre-faulted ahead of the writer by the warmer (``commitLogWarmAhead``).
        self.warm_ahead = warm_ahead
        self.segment_size = segment_size
        self.preallocate = preallocate
        self.lock = threading.Lock()
        self.segments: list[MappedFile] = []
        #: The sticky write error: set by the append point when a write fails and here when
        #: an fdatasync does; the store stays read-only until restarted.
        self.werr: str | None = None
        #: Set by retention while the disk is above the warning ratio: appends are refused.
        self.disk_full: str | None = None
        self._prepared: MappedFile | None = None
        #: Guards creating and taking the prepared segment: the warmer and a roll must not
        #: both create the file of the next segment.
        self._prepare_lock = threading.Lock()
        #: The segment whose preparation ahead of time failed (its base): the roll creates
        #: it, and reports why it cannot; the warmer does not try it again.
        self._unpreparable = -1
        self._warmer: threading.Thread | None = None
        self._warm_stop = threading.Event()
        layout.commitlog_dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ load

    def load(self, *, clean: bool = False) -> None:
        """Map every segment on disk; all are marked full until recovery says otherwise.
        After a ``clean`` stop no segment's creation was cut short: a short last one is
        damaged, as any other short one."""
        found = self.layout.segments_in(self.layout.commitlog_dir)
        for i, (base, path) in enumerate(found):
            size = path.stat().st_size
            if (size != self.segment_size and i == len(found) - 1 and not clean
                    and all_zero(path)):
                # A crash while the segment was being created: it never held a record.
                log.warning("deleting unfinished last commit-log segment %s (%d bytes)",
                            path.name, size)
                path.unlink()
                continue
            if size != self.segment_size:
                raise StoreReadOnly(
                    "LOAD_FAILED",
                    cause=f"segment {path.name} has {size} bytes, expected {self.segment_size}",
                )
            if base % self.segment_size:
                raise StoreReadOnly("LOAD_FAILED", cause=f"segment {path.name} is misaligned")
            seg = MappedFile(path, base, size, create=False)
            seg.wrote = seg.flushed = size
            self.segments.append(seg)

    # ------------------------------------------------------------------ positions

    @property
    def min_offset(self) -> int:
        return self.segments[0].base if self.segments else 0

    @property
    def max_offset(self) -> int:
        """Physical offset just past the last written byte."""
        if not self.segments:
            return 0
        last = self.segments[-1]
        return last.base + last.wrote

    @property
    def flushed_offset(self) -> int:
        for seg in reversed(self.segments):
            if seg.flushed:
                return seg.base + seg.flushed
        return self.min_offset

    def segment_for(self, offset: int) -> MappedFile | None:
        segs = self.segments
        if not segs or offset < segs[0].base:
            return None
        idx = (offset - segs[0].base) // self.segment_size
        if idx >= len(segs):
            return None
        seg = segs[idx]
        if seg.base <= offset < seg.end:
            return seg
        for seg in segs:  # a gap in bases: only after manual tampering
            if seg.base <= offset < seg.end:
                return seg
        return None

    # ------------------------------------------------------------------ segments (lock held)

    def new_segment(self, base: int) -> MappedFile:
        """Segment ``base``, created (or the one the warmer prepared) and appended."""
        with self._prepare_lock:  # held throughout: the warmer may be creating this file
            prepared, self._prepared = self._prepared, None
            if prepared is not None:
                if prepared.base == base:
                    self.segments.append(prepared)
                    return prepared
                prepared.destroy()
            path = self.layout.commitlog_segment(base)
            try:
                seg = MappedFile(path, base, self.segment_size, create=True,
                                 preallocate=self.preallocate)
            except OSError as exc:
                status = "DISK_FULL" if exc.errno == 28 else "WRITE_ERROR"
                raise StoreReadOnly(status,
                                    cause=f"cannot create segment {path.name}: {exc}") from exc
            self.segments.append(seg)
            return seg

    # ------------------------------------------------------------------ warming

    WARM_CHUNK = 4 * 1024 * 1024
    #: The pre-faulted run is topped up once the writer has used this much of it: each
    #: step then covers many pages instead of the few written since the last one.
    WARM_MIN = 1024 * 1024
    #: Seconds the warmer sleeps at least after a step with nothing to do ...
    WARM_IDLE_MIN = 0.002
    #: ... and at most: an idle broker's warmer wakes a few times a second, not sixty (a
    #: writer that starts meanwhile has the whole ``warm_ahead`` run pre-faulted before
    #: the warmer is back).
    WARM_IDLE_DEEP = 0.25

    def warm_step(self) -> bool:
        """Pre-fault the active segment ahead of the writer; prepare the next segment.

        Runs in the warmer thread. The kernel work (allocating and zeroing new page-cache
        pages, left clean: :meth:`MappedFile.populate`) happens without the GIL, on the
        other core, instead of in the appends. Returns ``True`` if it did some work.
        """
        if not self.segments or self.werr is not None:
            return False
        seg = self.segments[-1]
        seg.populated = max(seg.populated, seg.wrote)
        target = min(seg.size, seg.wrote + self.warm_ahead)
        if seg.populated < target and (target - seg.populated >= self.WARM_MIN
                                       or target == seg.size):
            return seg.populate(min(target, seg.populated + self.WARM_CHUNK), write=False)
        if (self._prepared is None and seg.wrote > seg.size * 3 // 4 and self.preallocate
                and self._unpreparable != seg.end):
            with self._prepare_lock:
                path = self.layout.commitlog_segment(seg.end)
                if self._prepared is not None or path.exists():
                    return False  # a roll got there first
                try:
                    nxt = MappedFile(path, seg.end, self.segment_size, create=True)
                except OSError as exc:
                    self._unpreparable = seg.end
                    log.warning("cannot prepare segment %s ahead of time: %s", path.name, exc)
                    return False
                nxt.populate(self.warm_ahead, write=False)
                self._prepared = nxt
                return True
        return False

    def warm_pause(self, last: float, moved: int, elapsed: float) -> float:
        """The warmer's next sleep after a step with nothing to do, having slept ``last``;
        the writer wrote ``moved`` bytes in the ``elapsed`` seconds since the look before.

        While the writer stands still: doubling from ``WARM_IDLE_MIN`` up to
        ``WARM_IDLE_DEEP``. While it moves: the time it takes at that rate to use half of
        the run pre-faulted ahead of it (at least ``WARM_MIN``), between the two. A writer
        at a gigabyte a second has the warmer back every 16 ms; one at a few megabytes a
        second (one send at a time) a few times a second, where naps of a fixed 16 ms woke
        it sixty times a second to find nothing to do, each wake-up taking the GIL from the
        event loop in the middle of a request.
        """
        if moved <= 0:
            return min(max(last * 2, self.WARM_IDLE_MIN), self.WARM_IDLE_DEEP)
        seg = self.segments[-1] if self.segments else None
        ahead = max(seg.populated - seg.wrote, self.WARM_MIN) if seg else self.WARM_MIN
        rate = moved / max(elapsed, 1e-6)
        return min(max(ahead / 2 / rate, self.WARM_IDLE_MIN), self.WARM_IDLE_DEEP)

    def start_warmer(self) -> None:
        def run() -> None:
            # Every wake-up takes the GIL from the event loop: the warmer sleeps as long as
            # the writer leaves it nothing to do.
            idle, seen, since = self.WARM_IDLE_MIN, self.max_offset, time.monotonic()
            while not self._warm_stop.is_set():
                if self.warm_step():
                    idle = self.WARM_IDLE_MIN
                    continue
                written, now = self.max_offset, time.monotonic()
                idle = self.warm_pause(idle, written - seen, now - since)
                seen, since = written, now
                if self._warm_stop.wait(idle):
                    return

        self._warm_stop.clear()
        self._warmer = NamedThread(target=run, name="tidemq-warm", daemon=True)
        self._warmer.start()

    def stop_warmer(self) -> None:
        self._warm_stop.set()
        if self._warmer is not None:
            self._warmer.join()
            self._warmer = None
        if self._prepared is not None:
            self._prepared.destroy()
            self._prepared = None

    # ------------------------------------------------------------------ reading

    def read(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy view of ``size`` bytes at ``offset``, or ``None`` if not stored."""
        seg = self.segment_for(offset)
        if seg is None:
            return None
        pos = offset - seg.base
        if pos + size > seg.wrote:
            return None
        return seg.view[pos : pos + size]

    # ------------------------------------------------------------------ flush

    def flush(self) -> int:
        """fdatasync every segment with unflushed bytes; returns the flushed offset."""
        for seg in self.segments:
            if seg.flushed < seg.wrote:
                try:
                    seg.flush()
                except StoreReadOnly as exc:
                    self.werr = exc.cause
                    raise
        return self.flushed_offset

    def dirty_bytes(self) -> int:
        return sum(seg.wrote - seg.flushed for seg in self.segments[-2:])

    # ------------------------------------------------------------------ recovery and retention

    def truncate(self, offset: int) -> None:
        """Drop everything at and after ``offset``; zero the tail of its segment."""
        keep: list[MappedFile] = []
        for seg in self.segments:
            if seg.base > offset or (seg.base == offset and offset != 0 and keep):
                log.warning("deleting commit-log segment %s beyond offset %d", seg.path.name,
                            offset)
                seg.destroy()
            else:
                keep.append(seg)
        self.segments = keep
        if keep:
            last = keep[-1]
            pos = offset - last.base
            if pos < last.size:
                last.zero_from(pos)
                last.sync()

    def delete_first(self) -> MappedFile:
        """Remove the oldest segment (retention); never the last one."""
        if len(self.segments) <= 1:
            raise ValueError("the last commit-log segment is never deleted")
        seg = self.segments.pop(0)
        seg.destroy()
        return seg

    def close(self) -> None:
        self.stop_warmer()
        for seg in self.segments:
            seg.close()

    def segment_paths(self) -> list[Path]:
        return [seg.path for seg in self.segments]

"""What a put answers: :class:`PutStatus` and :class:`PutResult`."""

from __future__ import annotations

import concurrent.futures
import enum
from collections.abc import Sequence
from typing import NamedTuple

from tidemq.store.flush import FlushGroup, FlushStatus

__all__ = ["PutResult", "PutStatus"]


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"


class PutResult(NamedTuple):
    """What a put stored. A tuple: the hot path builds one with ``tuple.__new__``."""

    status: PutStatus
    queue_offset: int
    phys_offsets: Sequence[int]
    sizes: Sequence[int]
    store_timestamp: int
    #: SYNC_FLUSH with ``wait_flush``: the group commit that makes the put durable.
    flush_group: FlushGroup | None = None
    #: Monotonic time after which waiting for ``flush_group`` gives FLUSH_DISK_TIMEOUT.
    flush_deadline: float = 0.0

    @property
    def count(self) -> int:  # type: ignore[override]  # shadows tuple.count on purpose
        """Records stored (1 for a single message or an inner batch)."""
        return len(self.phys_offsets)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the records stored: one put's records lie end to end in the log, so
        this is where the last ends less where the first begins (no sum over a batch's
        sizes)."""
        phys = self.phys_offsets
        return phys[-1] + self.sizes[-1] - phys[0]

    @property
    def durable(self) -> concurrent.futures.Future[FlushStatus] | None:
        """SYNC_FLUSH: a future completed with the flush status (the same object on each
        access); ``None`` under ASYNC_FLUSH or without ``wait_flush``."""
        group = self.flush_group
        return None if group is None else group.future(self.flush_deadline)

    def wait_durable(self, timeout: float | None = None) -> PutStatus:
        """Block until SYNC_FLUSH confirms (or times out); ``PUT_OK`` under ASYNC_FLUSH."""
        group = self.flush_group
        if group is None:
            return self.status
        flushed = group.wait(self.flush_deadline, timeout)
        return PutStatus.PUT_OK if flushed is FlushStatus.FLUSHED else (
            PutStatus.FLUSH_DISK_TIMEOUT)

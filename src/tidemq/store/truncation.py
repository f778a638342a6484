"""A cut of the commit log requested for the next start: a replica whose log diverged
from its new master's (an old master coming back) asks for its tail to go.

The request is a file (``truncateTo`` in the store root) holding the offset in decimal,
written atomically. The next :meth:`MessageStore.start
<tidemq.store.message_store.MessageStore.start>` hands it to recovery, which ends the
valid log there exactly as it ends it at a torn tail -- commit log zeroed and later
segments deleted, consume queues, LMQ entries and index cut, the epoch file cut -- and
only then removes the file. A process killed in between finds the request again and
makes the same cut: it is idempotent. A running replica cuts at once instead
(:meth:`MessageStore.cut_tail <tidemq.store.message_store.MessageStore.cut_tail>`),
with the request written first and removed last in the same way.
"""

from __future__ import annotations

from tidemq.errors import TideMQError
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["TruncationError", "clear", "pending", "request"]


class TruncationError(TideMQError):
    pass


def request(layout: StoreLayout, offset: int) -> None:
    """Ask the next start to cut the commit log at ``offset`` (a record boundary)."""
    if offset < 0:
        raise ValueError(f"cannot cut the commit log at {offset}")
    layout.root.mkdir(parents=True, exist_ok=True)
    current = pending(layout)
    if current is not None and current <= offset:
        return  # a deeper cut is already asked for
    atomic_write(layout.truncation_file, f"{offset}\n".encode())


def pending(layout: StoreLayout) -> int | None:
    path = layout.truncation_file
    if not path.exists():
        return None
    text = path.read_bytes().decode("ascii", "replace").strip()
    if not text.isdigit():
        raise TruncationError(f"{path}: {text[:40]!r} is not a commit-log offset; remove the "
                              "file to start without the cut, or write the offset into it")
    return int(text)


def clear(layout: StoreLayout) -> None:
    layout.truncation_file.unlink(missing_ok=True)

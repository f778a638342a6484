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
with the request written first and removed last in the same way; a caller that must not
block on the copy decides the cut (:meth:`~tidemq.store.message_store.MessageStore.begin_cut`,
a :class:`RunningCut`), keeps the tail in a thread
(:meth:`~tidemq.store.message_store.MessageStore.keep_cut`) and makes the cut
(:meth:`~tidemq.store.message_store.MessageStore.finish_cut`); in between the store
refuses every append (:class:`CutUnderWay`).

Before either cuts, the records of the tail are copied out
(:mod:`tidemq.store.kept_cuts`) and the request is rewritten with a second line
``kept <file> <records>`` (or ``kept - 0`` when the tail held no whole record): a start that finds
that line makes the cut without copying again, since the log may already be cut in
part; a start that does not copies the tail, which is still whole, again.
"""

from __future__ import annotations

from typing import NamedTuple

from tidemq.errors import StoreError, TideMQError
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = ["CutUnderWay", "KeptNote", "RunningCut", "TruncationError", "clear", "kept",
           "note_kept", "pending", "request"]


class TruncationError(TideMQError):
    pass


class RunningCut(NamedTuple):
    """A cut of a running replica's log, decided: at ``offset``, of the log that ends at
    ``end``; nothing may append until it is made."""

    offset: int
    end: int


class CutUnderWay(StoreError):
    """An append (a copy, a put) was asked for while a decided cut is not made yet."""

    def __init__(self, action: str, cut: RunningCut) -> None:
        super().__init__(f"cannot {action}: the commit log is being cut at {cut.offset} "
                         f"(its tail to {cut.end} is being kept)")
        self.action = action
        self.cut = cut


class KeptNote(NamedTuple):
    """What :func:`note_kept` recorded: the kept file's name (``None``: the tail held no
    whole record) and how many records it holds (``None`` in a request noted without)."""

    name: str | None
    records: int | None


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
    lines = path.read_bytes().decode("utf-8", "replace").splitlines() or [""]
    text = lines[0].strip()
    if not text.isdigit():
        raise TruncationError(f"{path}: {text[:40]!r} is not a commit-log offset; remove the "
                              "file to start without the cut, or write the offset into it")
    return int(text)


def note_kept(layout: StoreLayout, offset: int, name: str | None, records: int = 0) -> None:
    """Record that the tail from ``offset`` has been kept (``records`` of them in
    ``name``, or had nothing to keep); the cut may begin once this returns."""
    atomic_write(layout.truncation_file, f"{offset}\nkept {name or '-'} {records}\n".encode())


def kept(layout: StoreLayout) -> KeptNote | None:
    """What the pending cut's tail was kept in (:func:`note_kept`); ``None`` while it is
    not kept yet."""
    path = layout.truncation_file
    if not path.exists():
        return None
    lines = path.read_bytes().decode("utf-8", "replace").splitlines()
    if len(lines) < 2 or not lines[1].startswith("kept "):
        return None
    words = lines[1].split()
    name = words[1] if len(words) > 1 and words[1] != "-" else None
    records = int(words[2]) if len(words) > 2 and words[2].isdigit() else None
    return KeptNote(name, records)


def clear(layout: StoreLayout) -> None:
    layout.truncation_file.unlink(missing_ok=True)

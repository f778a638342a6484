"""The store's record of deleted topics, so that a deleted topic stays deleted.

A deleted topic's records stay in the commit log until retention removes their segments.
A start after a crash dispatches the log again from the checkpoint, and ``store verify
--repair`` rebuilds every queue from the whole log: without a record of the deletion
either would bring the topic's queues back, old messages and all, under a topic created
again with the name. ``config/deletedTopics.json`` keeps, per deleted topic, the log
offset its deletion began at (``before``): records of the topic below it are never
dispatched again, and a topic created again with the name gets the records from there.

A deletion is *pending* from its first step (marked here, durably, before anything is
removed) until its last (the topic table written, the queues removed): a start that finds
one pending finishes it. A replica's deletion is *adopted*, its master's mark, taken
after the topic table copied with it was written: a start that finishes it keeps the
table as it is (the topic may be there, created again on the master). Once the commit
log starts at or after an entry's offset, none of the topic's old records is left, and the
entry is dropped.

File: ``{"topics": {"<topic>": {"before": <offset>, "pending": <bool>}}}``, with
``"adopted": true`` in an adopted entry, replaced atomically on every change.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidemq.errors import MetadataUnreadable
from tidemq.store.checkpoint import atomic_write

__all__ = ["DeletedTopic", "DeletedTopics", "decode", "encode"]

FILE_NAME = "deletedTopics.json"


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    #: Records of the topic at log offsets below this one belong to the deleted topic.
    before: int
    #: The deletion began and is not finished.
    pending: bool
    #: A replica's mark, taken from its master (:meth:`DeletedTopics.adopt`).
    adopted: bool = False


def encode(entries: Mapping[str, DeletedTopic]) -> bytes:
    return json.dumps({"topics": {
        topic: {"before": e.before, "pending": e.pending} | ({"adopted": True} if e.adopted
                                                              else {})
        for topic, e in sorted(entries.items())}}, sort_keys=True,
        separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, DeletedTopic]:
    """The entries of a file's content; ``ValueError`` says what is wrong with it."""
    try:
        raw = json.loads(data)
        out: dict[str, DeletedTopic] = {}
        for topic, entry in raw["topics"].items():
            before, pending = entry["before"], entry["pending"]
            adopted = entry.get("adopted", False)
            if (not isinstance(topic, str) or type(before) is not int or before < 0
                    or type(pending) is not bool or type(adopted) is not bool):
                raise ValueError(f"entry {topic!r}: {entry!r}")
            out[topic] = DeletedTopic(before, pending, adopted)
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"not a table of deleted topics: {exc!r}") from None
    return out


class DeletedTopics:
    """The entries of one store's file; changes are written before they return."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: topic -> offset below which its records are not dispatched. Read without the
        #: lock (a whole dict replaced on a change).
        self.before: dict[str, int] = {}
        self._entries: dict[str, DeletedTopic] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read the file (none: no topic deleted); one that does not read stops the start
        (:class:`~tidemq.errors.MetadataUnreadable`)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = None
        entries: dict[str, DeletedTopic] = {}
        if data is not None:
            try:
                entries = decode(data)
            except ValueError as exc:
                raise MetadataUnreadable(str(self.path), str(exc)) from None
        self._set(entries)

    def hides(self, topic: str, phys: int) -> bool:
        """Whether the record of ``topic`` at log offset ``phys`` belongs to a deleted
        topic."""
        before = self.before.get(topic)
        return before is not None and phys < before

    def pending(self) -> list[str]:
        """The topics whose deletion began and did not finish, in name order."""
        return sorted(t for t, e in self._entries.items() if e.pending)

    def adopted(self) -> list[str]:
        """Those of :meth:`pending` whose mark is a master's (:meth:`adopt`)."""
        return sorted(t for t, e in self._entries.items() if e.pending and e.adopted)

    def begin(self, topics: Collection[str], before: int) -> None:
        """Mark ``topics`` deleted from log offset ``before`` down, their deletion pending
        (one write however many)."""
        with self._lock:
            self._write({**self._entries, **dict.fromkeys(topics, DeletedTopic(before, True))})

    def adopt(self, marks: Mapping[str, int]) -> None:
        """Mark each topic of ``marks`` deleted from its own log offset down, pending (one
        write): a replica taking its master's marks, each where the master's deletion
        began, in place of any it held."""
        with self._lock:
            self._write({**self._entries,
                         **{t: DeletedTopic(before, True, True)
                            for t, before in marks.items()}})

    def clamp(self, end: int) -> list[str]:
        """Bring every mark above ``end`` down to it (one write): a replica that took its
        master's marks ahead of its own log becomes master with this log, and whatever is
        put from here belongs to the topics created again. Returns those topics."""
        with self._lock:
            high = {t: DeletedTopic(end, e.pending, e.adopted)
                    for t, e in self._entries.items()
                    if e.before > end}
            if high:
                self._write({**self._entries, **high})
            return sorted(high)

    def finish(self, topics: Collection[str]) -> None:
        """The deletion of ``topics`` is done (one write however many)."""
        with self._lock:
            done = {t: DeletedTopic(e.before, False) for t in topics
                    if (e := self._entries.get(t)) is not None and e.pending}
            if done:
                self._write({**self._entries, **done})

    def forget_before(self, log_start: int) -> None:
        """Drop the finished entries whose records the log no longer holds (it starts at
        ``log_start``)."""
        with self._lock:
            kept = {t: e for t, e in self._entries.items()
                    if e.pending or e.before > log_start}
            if len(kept) != len(self._entries):
                self._write(kept)

    def _write(self, entries: dict[str, DeletedTopic]) -> None:
        if entries or self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, encode(entries))
        self._set(entries)

    def _set(self, entries: dict[str, DeletedTopic]) -> None:
        self._entries = entries
        self.before = {t: e.before for t, e in entries.items()}

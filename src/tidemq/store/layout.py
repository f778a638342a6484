"""The store's directory tree. The only module that builds a path.

::

    <root>/
      commitlog/<20-digit start offset>          commit-log segments (source of truth)
      consumequeue/<topic>/<queueId>/<20 digits> consume-queue files, named by logic byte offset
      batchconsumequeue/<topic>/<queueId>/...    batch consume queues (RIP-26)
      lmq/                                       RocksDB consume-queue store for LMQs (RIP-28)
      index/<20 digits>                          key index files, named by first physical offset
      config/                                    broker metadata (topics, offsets, ...),
                                                 deletedTopics.json (store.deleted_topics)
      convert/<topic>/                           staging of an offline queue conversion
      truncated/<epoch>-<fromOffset>.log         tails cut off the commit log, kept
      checkpoint                                 RocketMQ's StoreCheckpoint, TideMQ's
                                                 flushed/dispatched positions after it
      abort                                      present while running: absent = clean shutdown
      lock                                       one process per store root

Names are zero-padded to 20 digits so that ``ls`` sorts them by offset, as upstream.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["StoreLayout", "parse_segment_name", "segment_name"]

NAME_DIGITS = 20


def segment_name(base_offset: int) -> str:
    """``00000000001073741824`` for 1 GiB: the 20-digit zero-padded offset."""
    return f"{base_offset:0{NAME_DIGITS}d}"


def parse_segment_name(name: str) -> int | None:
    """The offset a segment file is named for, or ``None`` if it is not a segment name."""
    if len(name) != NAME_DIGITS or not name.isdigit():
        return None
    return int(name)


class StoreLayout:
    """Paths under one store root."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.root / "consumequeue"

    @property
    def batch_consumequeue_dir(self) -> Path:
        return self.root / "batchconsumequeue"

    @property
    def lmq_dir(self) -> Path:
        return self.root / "lmq"

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def checkpoint_file(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort_file(self) -> Path:
        return self.root / "abort"

    @property
    def lock_file(self) -> Path:
        return self.root / "lock"

    @property
    def epoch_file(self) -> Path:
        """Controller mode: which epoch began where (``tidemq.store.epoch_file``)."""
        return self.root / "epochFileCheckpoint"

    @property
    def truncation_file(self) -> Path:
        """A cut of the commit log the next recovery makes (``tidemq.store.truncation``)."""
        return self.root / "truncateTo"

    @property
    def truncated_dir(self) -> Path:
        """The tails cut off the commit log, kept (``tidemq.store.kept_cuts``)."""
        return self.root / "truncated"

    def commitlog_segment(self, base_offset: int) -> Path:
        return self.commitlog_dir / segment_name(base_offset)

    def topic_queues_dir(self, topic: str, *, batch: bool = False) -> Path:
        """The directory holding every queue directory of ``topic``."""
        return (self.batch_consumequeue_dir if batch else self.consumequeue_dir) / topic

    def conversion_dir(self, topic: str) -> Path:
        """Staging root of an offline queue conversion of ``topic`` (``convert/<topic>``):
        a store layout of its own whose queue directories are moved into place."""
        return self.root / "convert" / topic

    def queue_dir(self, topic: str, queue_id: int, *, batch: bool = False) -> Path:
        base = self.batch_consumequeue_dir if batch else self.consumequeue_dir
        return base / topic / str(queue_id)

    def queue_file(self, topic: str, queue_id: int, base: int, *, batch: bool = False) -> Path:
        return self.queue_dir(topic, queue_id, batch=batch) / segment_name(base)

    def index_file(self, base_offset: int) -> Path:
        return self.index_dir / segment_name(base_offset)

    def config_file(self, name: str) -> Path:
        return self.config_dir / name

    def segments_in(self, directory: Path) -> list[tuple[int, Path]]:
        """Segment files of ``directory`` sorted by base offset; other names are ignored."""
        if not directory.is_dir():
            return []
        found = []
        for entry in os.scandir(directory):
            base = parse_segment_name(entry.name)
            if base is not None and entry.is_file():
                found.append((base, Path(entry.path)))
        found.sort()
        return found

    def queues(self, *, batch: bool = False) -> list[tuple[str, int, Path]]:
        """Every ``(topic, queue_id, dir)`` with a consume-queue directory on disk."""
        base = self.batch_consumequeue_dir if batch else self.consumequeue_dir
        out: list[tuple[str, int, Path]] = []
        if not base.is_dir():
            return out
        for topic_entry in os.scandir(base):
            if not topic_entry.is_dir():
                continue
            for q_entry in os.scandir(topic_entry.path):
                if q_entry.is_dir() and q_entry.name.lstrip("-").isdigit():
                    out.append((topic_entry.name, int(q_entry.name), Path(q_entry.path)))
        out.sort()
        return out

"""StoreConfig: the message store's settings under RocketMQ's key names.

Every field ``snake_case`` is also settable by its RocketMQ key ``camelCase``
(``mapped_file_size_commit_log`` <- ``mappedFileSizeCommitLog``); a field whose RocketMQ
key is not plain camelCase names it in its metadata (``checkCRCOnRecover``). Defaults follow
docs/reference/store.md §9. Load from a ``.properties`` file with :meth:`StoreConfig.load`;
unknown keys are returned so the caller reports them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import bind, read_properties
from tidemq.types import FlushDiskType

__all__ = ["StoreConfig"]

CQ_UNIT = 20
BCQ_UNIT = 46


@dataclasses.dataclass(frozen=True, slots=True)
class StoreConfig:
    #: The store's directory: commit log, consume queues, index, checkpoint, and the broker's
    #: ``config`` files (topics, groups, offsets).
    store_path_root_dir: str = "./data/store"
    #: Bytes of each commit-log segment file (at least 4096). A store whose segments have
    #: another size does not open.
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    #: Bytes of each consume-queue file, a multiple of 20 (one entry).
    mapped_file_size_consume_queue: int = 300_000 * CQ_UNIT
    #: Bytes of each batch-consume-queue (RIP-26) file, a multiple of 46 (one entry).
    mapper_file_size_batch_consume_queue: int = 300_000 * BCQ_UNIT
    #: The largest message body the store appends, bytes (``maxMessageSize`` in the broker's file
    #: sets both).
    max_message_size: int = 4 * 1024 * 1024
    #: ``ASYNC_FLUSH``: a send is answered once written to the page cache; ``SYNC_FLUSH``: once on
    #: disk (group commit).
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    #: ASYNC_FLUSH: how often the flush thread looks at the commit log, ms.
    flush_interval_commit_log: int = 500
    #: ASYNC_FLUSH: the fewest dirty 4 KiB pages a flush writes, unless the thorough interval has
    #: passed.
    flush_commit_log_least_pages: int = 4
    #: ASYNC_FLUSH: the commit log is flushed at least this often however little is dirty, ms.
    flush_commit_log_thorough_interval: int = 10_000
    #: How often consume queues, the LMQ store and the index are flushed and the checkpoint written,
    #: ms.
    flush_interval_consume_queue: int = 1000
    #: Accepted for upstream's files; no effect: every consume queue is flushed whole every
    #: ``flushIntervalConsumeQueue``.
    flush_consume_queue_least_pages: int = 2
    #: Accepted for upstream's files; no effect: every consume queue is flushed whole every
    #: ``flushIntervalConsumeQueue``.
    flush_consume_queue_thorough_interval: int = 60_000
    #: SYNC_FLUSH: how long a send waits for its flush before it is answered FLUSH_DISK_TIMEOUT, ms.
    sync_flush_timeout: int = 5000
    #: Check each record's body CRC when recovering the commit log at start (a mismatch ends the log
    #: there).
    check_crc_on_recover: bool = dataclasses.field(default=True,
                                                   metadata={"key": "checkCRCOnRecover"})
    #: Hours of the day (0..23, ``;``-separated, e.g. ``04;16``) at which commit-log segments older
    #: than ``fileReservedTime`` are deleted.
    delete_when: str = "04"
    #: Hours a commit-log segment is kept after its last message was stored, before it may be
    #: deleted.
    file_reserved_time: int = 72
    #: Disk use (%, 1..100) above which expired segments are deleted at any hour.
    disk_max_used_space_ratio: int = 75
    #: Disk use (%, taken within 30..85) above which the oldest segments are deleted even before
    #: ``fileReservedTime``, with ``cleanFileForciblyEnable``.
    disk_space_clean_forcibly_ratio: int = 85
    #: Disk use (%, taken within 35..90) above which the store refuses writes until use drops.
    disk_space_warning_level_ratio: int = 90
    #: Allow deleting segments younger than ``fileReservedTime`` when the disk is above
    #: ``diskSpaceCleanForciblyRatio``.
    clean_file_forcibly_enable: bool = True
    #: How often a retention pass runs, ms.
    clean_resource_interval: int = 10_000
    #: The most commit-log segments one retention pass deletes.
    delete_file_batch_max: int = 10
    #: TideMQ: the most bytes of records one cut of the commit log keeps in
    #: ``truncated/`` (an old master's divergent tail, docs/replication.md); the records
    #: beyond are named in a warning and gone with the cut.
    kept_cut_max_bytes: int = 1024 * 1024 * 1024
    #: Index messages by key and by unique key (``queryMsgByKey``, ``queryMsgByUniqueKey``).
    message_index_enable: bool = True
    #: Hash slots of each index file; with ``maxIndexNum`` fixes its size.
    max_hash_slot_num: int = 5_000_000
    #: Entries of each index file; a full one is followed by a new file.
    max_index_num: int = 20_000_000
    #: Accepted for upstream's files; no effect: a pull's size is bounded by its own message count
    #: and ``maxPullBytes``.
    max_transfer_count_on_message_in_memory: int = 32
    #: Accepted for upstream's files; no effect: a pull's size is bounded by its own message count
    #: and ``maxPullBytes``.
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: Light message queues (RIP-28, docs/lmq.md): with ``enableMultiDispatch``, a message naming
    #: ``%LMQ%`` queues is also indexed into each.
    enable_lmq: bool = False
    #: Dispatch a message to the queues its ``INNER_MULTI_DISPATCH`` property names (needs
    #: ``enableLmq``).
    enable_multi_dispatch: bool = False
    #: The most LMQs one message may name; a send naming more is refused.
    max_lmq_targets_per_message: int = 64
    #: Concurrent dispatch: prepare dispatch rounds on ``dispatchWorkers`` threads, committed in
    #: order.
    enable_build_consume_queue_concurrently: bool = False
    #: Accepted for upstream's files; no effect: ordinary queues always use consume-queue files,
    #: LMQs RocksDB (docs/lmq.md).
    store_type: str = "default"
    # TideMQ additions
    #: Reserve a new commit-log segment's disk blocks when it is created (false: a sparse
    #: file), and create the next segment before the current one is full.
    preallocate_segments: bool = True
    #: Bytes of the active commit-log segment the warmer thread keeps pre-faulted ahead
    #: of the writer (0: no warmer; appends fault their pages in themselves).
    commit_log_warm_ahead: int = 32 * 1024 * 1024
    #: Log a warning when dispatch falls behind the commit log by more than this, ms (0: never);
    #: a replica counts from when it wrote its master's bytes, not the master's store time.
    dispatch_lag_warn_ms: int = 1000
    #: LMQs whose offsets are kept in memory: the LMQ store's cache of their metadata,
    #: and each of the appender's two generations of the next offsets it handed out
    #: (:mod:`tidemq.store.lmq_next`). A queue beyond them is taken from the table of
    #: ``lmqKnownQueues``, else read from RocksDB.
    lmq_cached_queues: int = 200_000
    #: LMQs whose metadata the LMQ store keeps besides the cached ones, compactly
    #: (:mod:`tidemq.store.lmq_table`): filled by a start's walk and with the queues the
    #: cache drops. A queue in neither is read from RocksDB when used (0: none kept).
    lmq_known_queues: int = 2_000_000
    #: Wait this long before dispatching a small round, so rounds batch up (0 = never).
    #: Off by default: the dispatcher wakes on the append and takes what is there; while
    #: it writes a round the next one fills by itself. A linger saves some CPU per
    #: message at moderate rates and adds its length (and a sleep's scheduling delay on a
    #: busy machine) to every message's dispatch lag.
    dispatch_linger_ms: float = 0.0
    #: A dispatch round of at most this many records, confirmed at its append (ASYNC_FLUSH)
    #: while the dispatch thread sleeps with nothing in flight, is applied by the thread
    #: that appended it (a broker's event loop: at the end of its pass, after the put's
    #: answer), and its dispatch hooks (the held pulls' wake-ups) run there: no hand-off
    #: to the dispatch thread and back (0: every round on the dispatch thread). Larger
    #: rounds, any round while a linger is set, and the round of a put from a thread
    #: without an event loop whose previous such put came less than a millisecond
    #: before, go to the thread.
    dispatch_on_append_records: int = 64
    #: Concurrent dispatch (``enableBuildConsumeQueueConcurrently``): the threads that prepare
    #: rounds (docs/benchmarks.md#concurrent-dispatch).
    dispatch_workers: int = 1
    #: Concurrent dispatch: rounds prepared ahead of the one being committed.
    dispatch_ring_size: int = 8
    #: Concurrent dispatch: the most records of one round.
    dispatch_round_records: int = 2048

    def __post_init__(self) -> None:
        if self.mapped_file_size_commit_log < 4096:
            raise ConfigError("mappedFileSizeCommitLog must be at least 4096 bytes",
                              key="mappedFileSizeCommitLog")
        if self.mapped_file_size_consume_queue % CQ_UNIT:
            raise ConfigError("mappedFileSizeConsumeQueue must be a multiple of 20",
                              key="mappedFileSizeConsumeQueue")
        if self.mapper_file_size_batch_consume_queue % BCQ_UNIT:
            raise ConfigError("mapperFileSizeBatchConsumeQueue must be a multiple of 46",
                              key="mapperFileSizeBatchConsumeQueue")
        if not 0 < self.disk_max_used_space_ratio <= 100:
            raise ConfigError("diskMaxUsedSpaceRatio must be in 1..100",
                              key="diskMaxUsedSpaceRatio")
        if self.commit_log_warm_ahead < 0:
            raise ConfigError("commitLogWarmAhead must not be negative",
                              key="commitLogWarmAhead")
        if self.lmq_cached_queues < 1:
            raise ConfigError("lmqCachedQueues must be at least 1", key="lmqCachedQueues")
        if self.kept_cut_max_bytes < 0:
            raise ConfigError("keptCutMaxBytes must be 0 or more", key="keptCutMaxBytes")
        if self.lmq_known_queues < 0:
            raise ConfigError("lmqKnownQueues must not be negative", key="lmqKnownQueues")
        if self.dispatch_on_append_records < 0:
            raise ConfigError("dispatchOnAppendRecords must not be negative",
                              key="dispatchOnAppendRecords")
        try:
            hours = self.delete_hours
        except ValueError:
            hours = frozenset({-1})
        if not all(0 <= h <= 23 for h in hours):
            raise ConfigError(f"deleteWhen must be hours 0..23 separated by ';', got "
                              f"{self.delete_when!r}", key="deleteWhen")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type is FlushDiskType.SYNC_FLUSH

    @property
    def delete_hours(self) -> frozenset[int]:
        """Hours of the day named by ``deleteWhen`` (``"04;16"``)."""
        hours = set()
        for part in self.delete_when.split(";"):
            if part.strip():
                hours.add(int(part))
        return frozenset(hours)

    def replace(self, **changes: Any) -> StoreConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> tuple[StoreConfig, list[str]]:
        """Build from RocketMQ keys; returns the config and the keys it does not know."""
        return bind(cls, values)

    @classmethod
    def load(cls, path: str | Path) -> tuple[StoreConfig, list[str]]:
        return cls.from_mapping(read_properties(path))

"""PushOptions: the tuning of a push consumer, with Java ``DefaultMQPushConsumer``'s
defaults under its names in snake case. Durations are seconds, sizes bytes."""

from __future__ import annotations

import dataclasses

from tidemq.client.locks import LOCK_RENEW_INTERVAL, LOCK_STALE_AFTER
from tidemq.client.process_queue import Limits
from tidemq.client.rebalance import DEFAULT_REBALANCE_INTERVAL
from tidemq.client.retry import DEFAULT_MAX_RECONSUME_TIMES
from tidemq.errors import ConfigError

__all__ = ["PushOptions"]


@dataclasses.dataclass(frozen=True, slots=True)
class PushOptions:
    """See the module docstring; every field is checked on construction."""

    #: Messages handed to the listener at once.
    consume_batch_max_size: int = 1
    #: Listener calls running at once (Java ``consumeThreadMax``): the size of the task
    #: pool, or of the thread pool of a ThreadedPushConsumer.
    consume_concurrency: int = 20
    #: Stop pulling a queue while it buffers more than this many messages ...
    pull_threshold_for_queue: int = 1000
    #: ... or more than this many body bytes ...
    pull_threshold_size_for_queue: int = 100 * 1024 * 1024
    #: ... or (concurrent consumers) its oldest and newest buffered offsets are further
    #: apart than this; 0 disables the span check.
    consume_concurrently_max_span: int = 2000
    #: Deliveries after which a message goes to the dead-letter queue; -1: 16 for
    #: concurrent consumers, unlimited local retries for orderly ones.
    max_reconsume_times: int = -1
    #: Delay level asked for a failed message (0: the broker picks 3 + reconsume times).
    retry_delay_level: int = 0
    #: Orderly: pause before a failed batch is retried locally.
    suspend_current_queue_time: float = 1.0
    #: Concurrent: when sending a failed message back fails too, retry it locally after.
    consume_retry_delay: float = 5.0
    #: Periodic rebalance (a broker's NOTIFY_CONSUMER_IDS_CHANGED triggers one at once).
    rebalance_interval: float = DEFAULT_REBALANCE_INTERVAL
    #: Commit the consumed offsets this often (and on release and close).
    persist_consumer_offset_interval: float = 5.0
    #: A queue taken over from another member starts this long after the rebalance, so
    #: that the previous owner's release commit lands first (TideMQ; 0 disables).
    handover_delay: float = 1.0
    #: Orderly: renew held locks this often; distrust a lock not confirmed for
    #: ``lock_stale_after``; ask again for queues not granted yet every
    #: ``lock_retry_interval``.
    lock_renew_interval: float = LOCK_RENEW_INTERVAL
    lock_stale_after: float = LOCK_STALE_AFTER
    lock_retry_interval: float = 1.0
    #: How long ``close`` waits for the listener calls in flight (Java
    #: ``awaitTerminationMillisWhenShutdown``); then it cancels them, and their messages,
    #: left uncommitted, are delivered again. ``None``: as long as they take (TideMQ's
    #: default; Java's, 0, does not wait).
    await_termination_when_shutdown: float | None = None

    def __post_init__(self) -> None:
        for key in ("consume_batch_max_size", "consume_concurrency",
                    "pull_threshold_for_queue", "pull_threshold_size_for_queue"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key} must be at least 1", key=key)
        for key in ("consume_concurrently_max_span", "handover_delay",
                    "suspend_current_queue_time", "consume_retry_delay"):
            if getattr(self, key) < 0:
                raise ConfigError(f"{key} must not be negative", key=key)
        for key in ("rebalance_interval", "persist_consumer_offset_interval",
                    "lock_renew_interval", "lock_stale_after", "lock_retry_interval"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive", key=key)
        wait = self.await_termination_when_shutdown
        if wait is not None and wait < 0:
            raise ConfigError("await_termination_when_shutdown must not be negative",
                              key="await_termination_when_shutdown")
        if self.max_reconsume_times < -1:
            raise ConfigError("max_reconsume_times must be -1 or more",
                              key="max_reconsume_times")

    @property
    def limits(self) -> Limits:
        return Limits(self.pull_threshold_for_queue, self.pull_threshold_size_for_queue,
                      self.consume_concurrently_max_span)

    def max_reconsume(self, orderly: bool) -> int:
        """The effective ``maxReconsumeTimes``; -1 (orderly) means no limit."""
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return -1 if orderly else DEFAULT_MAX_RECONSUME_TIMES

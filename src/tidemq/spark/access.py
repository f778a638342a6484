"""Blocking access to the cluster for the Spark source: queues, offsets, pulls.

Used on the driver (planning: queues, min/max offsets, time search) and on executors
(``read``: pulls of a fixed offset range). No pyspark import here. Topic queues are found
through the name server; light message queues (RIP-28) are not registered there, so
their broker address comes from the ``broker`` option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from tidemq.client.blocking import BlockingLmqPullConsumer, BlockingPullConsumer
from tidemq.client.pull import PulledBody, PullResult
from tidemq.spark.options import SourceOptions
from tidemq.types import MessageQueue

__all__ = ["ClusterAccess", "PulledBody", "QueueKey", "queue_key", "split_key"]

LMQ_BROKER = "lmq"


class QueueKey(NamedTuple):
    topic: str
    broker: str
    queue_id: int


def queue_key(q: QueueKey) -> str:
    """The per-queue key of the offsets JSON: ``"broker:queueId"``."""
    return f"{q.broker}:{q.queue_id}"


def split_key(topic: str, key: str) -> QueueKey:
    broker, _, qid = key.rpartition(":")
    return QueueKey(topic, broker, int(qid))


class ClusterAccess:
    """One blocking connection set for the source's options; close it when done."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        if opts.is_lmq:
            assert opts.broker is not None
            self.consumer: BlockingPullConsumer = BlockingLmqPullConsumer(
                opts.group, opts.broker, config=opts.client_config(opts.broker))
        else:
            self.consumer = BlockingPullConsumer(
                opts.group, config=opts.client_config())

    def close(self) -> None:
        self.consumer.close()

    def topics(self) -> list[str]:
        if self.opts.is_lmq:
            return list(self.opts.lmqs)
        if self.opts.topic_pattern is None:
            return list(self.opts.topics)
        pattern = re.compile(self.opts.topic_pattern)
        names = self.consumer.routes.topic_list()
        return sorted(t for t in names if pattern.fullmatch(t) and not t.startswith("%"))

    def queues(self) -> list[QueueKey]:
        out: list[QueueKey] = []
        for topic in self.topics():
            if self.opts.is_lmq:
                out.append(QueueKey(topic, LMQ_BROKER, 0))
                continue
            for mq in self.consumer.queues(topic):
                out.append(QueueKey(mq.topic, mq.broker_name, mq.queue_id))
        return sorted(set(out))

    @staticmethod
    def _mq(q: QueueKey) -> MessageQueue:
        return MessageQueue(q.topic, q.broker, q.queue_id)

    def min_offset(self, q: QueueKey) -> int:
        return self.consumer.get_min_offset(self._mq(q))

    def max_offset(self, q: QueueKey) -> int:
        return self.consumer.get_max_offset(self._mq(q))

    def search(self, q: QueueKey, timestamp_ms: int) -> int:
        return self.consumer.search_offset(self._mq(q), timestamp_ms)

    def pull(self, q: QueueKey, offset: int, max_nums: int) -> PullResult:
        return self.consumer.pull(self._mq(q), offset, max_nums, expression=self.opts.tags)

    def pull_body(self, q: QueueKey, offset: int, max_nums: int) -> PulledBody:
        """A pull whose records the caller decodes (the executors' columnar path);
        tags are filtered by the broker (by hash) and then by the caller."""
        return self.consumer.pull_body(self._mq(q), offset, max_nums,
                                       expression=self.opts.tags)

    def commit(self, offsets: Mapping[QueueKey, int]) -> None:
        """Store the group's offsets of ``offsets``' queues, one request a broker."""
        self.consumer.commit_all({self._mq(q): offset for q, offset in offsets.items()})

    def bounds(self, queues: Sequence[QueueKey]) -> dict[QueueKey, tuple[int, int]]:
        return {q: (self.min_offset(q), self.max_offset(q)) for q in queues}

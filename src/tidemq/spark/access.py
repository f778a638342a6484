"""Blocking access to the cluster for the Spark source: queues, offsets, pulls.

Used on the driver (planning: queues, min/max offsets, time search) and on executors
(``read``: pulls of a fixed offset range). No pyspark import here. Topic queues are found
through the name server; light message queues (RIP-28) are not registered there, so
their broker address comes from the ``broker`` option.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import NamedTuple

from tidemq.client.blocking import BlockingPullConsumer
from tidemq.client.config import ClientConfig
from tidemq.client.pull import PullResult, pull_request, read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageResponseHeader
from tidemq.errors import ResponseCode, error_for_code
from tidemq.spark.options import SourceOptions
from tidemq.types import MessageQueue, PullStatus

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


_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


class PulledBody(NamedTuple):
    """One pull, its body left undecoded (``b""`` unless ``status`` is FOUND)."""

    status: PullStatus
    next_offset: int
    min_offset: int
    max_offset: int
    body: bytes


class _LmqConsumer(BlockingPullConsumer):
    """Pulls that go to one fixed broker (LMQs are not in any route)."""

    def __init__(self, group: str, broker: str, config: ClientConfig) -> None:
        super().__init__(group, broker, config=config)
        self.broker = broker

    def _request(self, queue: MessageQueue, cmd: RemotingCommand,
                 timeout: float | None = None) -> tuple[RemotingCommand, str]:
        return self.client.request(self.broker, cmd, timeout), self.broker

    def pull(self, queue: MessageQueue, offset: int, max_nums: int = 32, *,
             expression: str = "*", timeout: float | None = None) -> PullResult:
        # A record's own queue offset belongs to its parent queue, never filter by it.
        sub = Subscription.parse(queue.topic, expression)
        cmd = pull_request(self.group, queue, offset, max_nums=max_nums, subscription=sub)
        response, addr = self._request(queue, cmd, timeout)
        return read_pull_response(response, queue, sub, address=addr, offset=None)


class ClusterAccess:
    """One blocking connection set for the source's options; close it when done."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        if opts.is_lmq:
            assert opts.broker is not None
            self.consumer: BlockingPullConsumer = _LmqConsumer(
                opts.group, opts.broker, ClientConfig.for_namesrv(opts.namesrv, None))
        else:
            self.consumer = BlockingPullConsumer(opts.group, opts.namesrv)

    def close(self) -> None:
        self.consumer.close()

    def topics(self) -> list[str]:
        if self.opts.is_lmq:
            return list(self.opts.lmqs)
        if self.opts.topic_pattern is None:
            return list(self.opts.topics)
        pattern = re.compile(self.opts.topic_pattern)
        cmd = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        response, _ = self.consumer.routes.request_any(lambda: cmd)
        names = json.loads(response.full_body() or b"{}").get("topicList", [])
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
        mq = self._mq(q)
        sub = Subscription.parse(q.topic, self.opts.tags)
        cmd = pull_request(self.opts.group, mq, offset, max_nums=max_nums, subscription=sub)
        response, addr = self.consumer._request(mq, cmd)
        status = _STATUS.get(response.code)
        if status is None:
            raise error_for_code(response.code, response.remark or "", address=addr)
        header = PullMessageResponseHeader.from_ext(response.ext_fields)
        body = response.full_body() if status is PullStatus.FOUND else b""
        return PulledBody(status, header.next_begin_offset, header.min_offset,
                          header.max_offset, body)

    def commit(self, q: QueueKey, offset: int) -> None:
        self.consumer.commit(self._mq(q), offset)

    def bounds(self, queues: Sequence[QueueKey]) -> dict[QueueKey, tuple[int, int]]:
        return {q: (self.min_offset(q), self.max_offset(q)) for q in queues}

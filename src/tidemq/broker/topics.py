"""Topic configs of one broker: validation, auto-creation, persistence.

Persisted to ``config/topics.json`` as a TopicConfigSerializeWrapper (RocketMQ's shape),
replaced atomically on every change. The data version counter moves on every change so
the name server registration can tell. System topics: ``TBW102`` (the auto-create
template, perm 7 = INHERIT|READ|WRITE, only while ``autoCreateTopicEnable``), the
broker-name and cluster-name topics, and the topics where delayed messages wait --
``SCHEDULE_TOPIC_XXXX`` with one queue per delay level and ``rmq_sys_wheel_timer`` with
one queue -- as upstream; with ``traceTopicEnable``, the message-trace topic
(``msgTraceTopicName``, default ``RMQ_SYS_TRACE_TOPIC``) with one queue. The parking
topics are declared so that they can be read like any topic (pulls, offsets, stats,
``queryMsgByOffset``); sending to them stays refused by name (:func:`validate_topic`,
:data:`SEND_FORBIDDEN_TOPICS`), and their queue counts follow ``messageDelayLevel`` at
every start.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Container

from tidemq.broker.delay import SCHEDULE_TOPIC, TIMER_TOPIC
from tidemq.broker.table_file import TableFile
from tidemq.broker.table_json import read_file
from tidemq.codec.bodies import (
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    decode_body,
)
from tidemq.codec.topic_table import encode_topics
from tidemq.errors import ConfigError
from tidemq.store.checkpoint import atomic_write
from tidemq.store.layout import StoreLayout

__all__ = [
    "AUTO_CREATE_TOPIC",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "SEND_FORBIDDEN_TOPICS",
    "TRACE_TOPIC",
    "TopicManager",
    "validate_topic",
]

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC = "TBW102"
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
MAX_TOPIC_LENGTH = 127
SYSTEM_TOPICS = frozenset({"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer",
                           "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC",
                           "OFFSET_MOVED_EVENT"})
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: System topics a client may not send to (upstream's ``TopicValidator``
#: ``NOT_ALLOWED_SEND_TOPIC_SET``): every one but the trace topic, where clients with
#: message trace on send their records.
SEND_FORBIDDEN_TOPICS = SYSTEM_TOPICS - {TRACE_TOPIC}
_TOPIC_RE = re.compile(r"^[A-Za-z0-9%_|-]+$")
QUEUE_TYPE = "queue.type"


def validate_topic(topic: str, *, allow_system: bool = False) -> str | None:
    """Why ``topic`` is not a valid topic name, or ``None`` when it is (a system topic is
    not, unless ``allow_system``)."""
    if not topic:
        return "the topic name is empty"
    limit = 255 if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)) else MAX_TOPIC_LENGTH
    if len(topic) > limit:
        return f"the topic name is longer than {limit} characters"
    if not _TOPIC_RE.match(topic):
        return f"the topic name {topic!r} contains characters outside [A-Za-z0-9%_|-]"
    if not allow_system and topic in SYSTEM_TOPICS:
        return f"{topic} is a system topic"
    return None


class TopicManager:
    def __init__(self, layout: StoreLayout, *, broker_name: str, cluster_name: str,
                 auto_create: bool, default_queue_nums: int,
                 schedule_queue_nums: int = 18, trace_topic: str | None = None) -> None:
        if trace_topic is not None and (why := validate_topic(trace_topic,
                                                              allow_system=True)):
            raise ConfigError(f"msgTraceTopicName: {why}", key="msgTraceTopicName")
        #: The message-trace topic created at start (``traceTopicEnable``), if any.
        self.trace_topic = trace_topic
        self.path = layout.config_file("topics.json")
        #: Queues of SCHEDULE_TOPIC_XXXX: one per delay level.
        self.schedule_queue_nums = schedule_queue_nums
        self.broker_name = broker_name
        self.cluster_name = cluster_name
        self.auto_create = auto_create
        self.default_queue_nums = default_queue_nums
        self.topics: dict[str, TopicConfig] = {}
        #: The topics whose queues are BatchConsumeQueues (``queue.type=BatchCQ``), kept
        #: with the table: telling the store of them walks these, not every topic.
        self.batch_cq: set[str] = set()
        #: Topics whose deletion is under way (:mod:`tidemq.broker.topic_deletion`): the
        #: store's refused topics, set by the broker. Nothing puts them back in the table
        #: meanwhile (a send, an admin request, a logical-queue mapping).
        self.deleting: Container[str] = frozenset()
        self.data_version = DataVersion(timestamp=int(time.time() * 1000))
        self._lock = threading.Lock()
        #: When ``topics.json`` is written: at once after a change, or on a thread after
        #: a change made in ``file.deferred()`` (a send's creation of a topic is written
        #: before it returns, so that nothing acknowledged after it can outlive it).
        self.file = TableFile(self._write, "the topic table")

    # ------------------------------------------------------------------ load / persist

    def load(self) -> None:
        """Read the file (none: only the system topics); one that does not read -- empty,
        cut short, garbled -- stops the start (:class:`~tidemq.errors.MetadataUnreadable`)
        rather than serve, and then write, a table without the user's topics."""
        wrapper = read_file(self.path, lambda raw: decode_body(raw, TopicConfigSerializeWrapper))
        if wrapper is not None:
            self.topics = dict(wrapper.topic_config_table)
            self.data_version = wrapper.data_version
        self._ensure_system_topics()
        self.batch_cq = {name for name, tc in self.topics.items() if _batch_cq(tc)}

    def _ensure_system_topics(self) -> None:
        if self.auto_create:
            self.topics.setdefault(AUTO_CREATE_TOPIC, TopicConfig(
                topic_name=AUTO_CREATE_TOPIC, read_queue_nums=self.default_queue_nums,
                write_queue_nums=self.default_queue_nums,
                perm=PERM_INHERIT | PERM_READ | PERM_WRITE))
        else:
            self.topics.pop(AUTO_CREATE_TOPIC, None)
        for name in (self.broker_name, self.cluster_name):
            self.topics.setdefault(name, TopicConfig(
                topic_name=name, read_queue_nums=1, write_queue_nums=1,
                perm=PERM_READ | PERM_WRITE))
        if self.trace_topic is not None:
            self.topics.setdefault(self.trace_topic, TopicConfig(
                topic_name=self.trace_topic, read_queue_nums=1, write_queue_nums=1,
                perm=PERM_READ | PERM_WRITE))
        for name, queues in ((SCHEDULE_TOPIC, self.schedule_queue_nums), (TIMER_TOPIC, 1)):
            self.topics[name] = TopicConfig(topic_name=name, read_queue_nums=queues,
                                            write_queue_nums=queues,
                                            perm=PERM_READ | PERM_WRITE)

    def persist(self) -> None:
        """Write the table now. Safe from another thread, and meant to run on one at scale
        (:class:`~tidemq.broker.table_file.TableFile`)."""
        self.file.write()

    def _write(self) -> None:
        """The table copied whole (one C call; its configs are replaced on a change, never
        changed in place) and written, encoded a slice of topics at a time."""
        wrapper = TopicConfigSerializeWrapper(topic_config_table=self.topics.copy(),
                                              data_version=self.data_version)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, encode_topics(wrapper))

    def _changed(self, state_version: int | None = None) -> None:
        dv = self.data_version
        self.data_version = DataVersion(
            state_version=dv.state_version if state_version is None else state_version,
            timestamp=int(time.time() * 1000), counter=dv.counter + 1)
        self.file.changed()

    def set_state_version(self, version: int) -> None:
        """Step the data version into state ``version`` (RocketMQ's
        ``nextVersion(stateVersion)``): a controller-mode broker's master epoch, by which
        the name servers keep the routes with the master elected last."""
        if version != self.data_version.state_version:
            self._changed(version)

    def new_version(self) -> None:
        """Step the data version without changing the table: the name servers take the
        next registration's topics whole (the broker's permission changed)."""
        self._changed()

    # ------------------------------------------------------------------ queries

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(topic_config_table=dict(self.topics),
                                           data_version=self.data_version)

    def is_batch_cq(self, topic: str) -> bool:
        return topic in self.batch_cq

    # ------------------------------------------------------------------ changes

    def upsert(self, tc: TopicConfig) -> bool:
        """Create or update ``tc``; returns whether anything changed."""
        with self._lock:
            old = self.topics.get(tc.topic_name)
            if old == tc:
                return False
            self.topics[tc.topic_name] = tc
            if _batch_cq(tc):
                self.batch_cq.add(tc.topic_name)
            else:
                self.batch_cq.discard(tc.topic_name)
            self._changed()
        log.info("topic %s %s: read=%d write=%d perm=%d attributes=%s", tc.topic_name,
                 "updated" if old else "created", tc.read_queue_nums, tc.write_queue_nums,
                 tc.perm, tc.attributes)
        return True

    def delete(self, topic: str) -> bool:
        with self._lock:
            if self.topics.pop(topic, None) is None:
                return False
            self.batch_cq.discard(topic)
            self._changed()
        log.info("topic %s deleted", topic)
        return True

    def create_on_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create ``topic`` from an INHERIT template such as TBW102 (remoting.md §2.7);
        ``None`` while its deletion is under way."""
        if topic in self.deleting:
            return None
        if topic.startswith(RETRY_PREFIX) or topic.startswith(DLQ_PREFIX):
            tc = TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1,
                             perm=PERM_READ | PERM_WRITE)
            self.upsert(tc)
            return tc
        template = self.topics.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT or not self.auto_create:
            return None
        n = max(1, min(queue_nums, template.write_queue_nums))
        tc = TopicConfig(topic_name=topic, read_queue_nums=n, write_queue_nums=n,
                         perm=template.perm & ~PERM_INHERIT)
        self.upsert(tc)
        return tc


def _batch_cq(tc: TopicConfig) -> bool:
    """Whether ``tc``'s queues are BatchConsumeQueues (``queue.type=BatchCQ``)."""
    return tc.attributes.get(QUEUE_TYPE) == "BatchCQ"

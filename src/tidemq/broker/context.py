"""BrokerContext: what request processors may use -- the broker's state and services.

Processors receive this object, never the broker itself: the store, the metadata managers
(topics, consumer offsets, subscription groups, logical-queue mappings), the client
tables, locks, delays, statistics, the broker's configuration, the outbound client, the
table of parked pulls and the few broker-wide events (topics changed, consumer ids
changed, an offset committed). :class:`~tidemq.broker.app.BrokerApp` builds it, wires the
processors to it and runs their lifecycle; nothing here imports a processor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from tidemq.broker.auth_store import AuthStore
from tidemq.broker.clients import ConsumerManager, ProducerManager
from tidemq.broker.config import BrokerConfig
from tidemq.broker.delay import DelayPolicy, parse_delay_levels
from tidemq.broker.groups import SubscriptionGroupManager
from tidemq.broker.half_queue import HalfQueue
from tidemq.broker.holds import HoldTable
from tidemq.broker.locks import LockTable
from tidemq.broker.logical import LogicalQueues
from tidemq.broker.offsets import OffsetManager
from tidemq.broker.pull_positions import PullPositions
from tidemq.broker.replication.carried_offsets import CarriedOffsets
from tidemq.broker.replication.service import ReplicationService
from tidemq.broker.schedule import ScheduleService
from tidemq.broker.stats import BrokerStats
from tidemq.broker.topics import TopicManager
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.server_roles import refuse_unserved
from tidemq.codec.signature import Credentials
from tidemq.errors import TideMQError
from tidemq.net import Connection, RemotingClient, RemotingServer
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_store import LMQ_PREFIX
from tidemq.store.message_store import MessageStore

__all__ = ["ROUTE_WAIT", "BrokerContext"]

#: How long a request that created or changed a topic waits for the name servers to take
#: the new route before it answers (seconds).
ROUTE_WAIT = 3.0


class BrokerContext:
    """The broker's state and services, shared by its processors (module docstring)."""

    def __init__(self, config: BrokerConfig, store_config: StoreConfig) -> None:
        self.config = config
        self.store_config = store_config
        self.layout = StoreLayout(store_config.store_path_root_dir)
        self.store = MessageStore(store_config)
        self.topics = TopicManager(self.layout, broker_name=config.broker_name,
                                   cluster_name=config.broker_cluster_name,
                                   auto_create=config.auto_create_topic_enable,
                                   default_queue_nums=config.default_topic_queue_nums,
                                   trace_topic=(config.msg_trace_topic_name
                                                if config.trace_topic_enable else None),
                                   schedule_queue_nums=len(
                                       parse_delay_levels(config.message_delay_level)))
        self.topics.deleting = self.store.refused_topics  # refused while being deleted
        self.offsets = OffsetManager(self.layout)
        #: Where each group's pulls have reached (for GET_CONSUME_STATS' pullOffset).
        self.pulled = PullPositions()
        self.store.retention.consumed_offsets = self.offsets.lowest_by_queue
        self.subscription_groups = SubscriptionGroupManager(
            self.layout, auto_create=config.auto_create_subscription_group,
            retry_max_times=config.max_reconsume_times)
        self.producers = ProducerManager()
        self.consumers = ConsumerManager()
        self.locks = LockTable(config.rebalance_lock_max_live_time)
        self.schedule = ScheduleService(self.store, self.layout, DelayPolicy(
            parse_delay_levels(config.message_delay_level),
            max_timer_ms=config.timer_max_delay_sec * 1000, clock=self.store.clock))
        self.stats = BrokerStats()
        #: Open transactions: the half and op topics (:mod:`tidemq.broker.half_queue`).
        self.transactions = HalfQueue(self.store, self.topics, self.topics_changed,
                                      self.offsets)
        #: The broker's role in its group and the replication that follows it.
        self.replication = ReplicationService(config, self.store)
        #: Offsets this broker took while a replica, for its master (metadata sync).
        self.carried_offsets = CarriedOffsets()
        self.logical = LogicalQueues(self.layout.config_file("logicalQueues.json"))
        #: The ACL 2.0 users and ACLs (served whatever ACL model is on).
        self.auth = AuthStore(self.layout.config_dir)
        self.server = RemotingServer(config.bind_address, config.listen_port,
                                     max_frame_size=config.max_frame_size,
                                     receive_budget=config.max_incomplete_frame_bytes,
                                     tls=config.tls_server)
        self.server.register_default(
            lambda conn, cmd: refuse_unserved(cmd, "broker", config.broker_name))
        own = config.credentials
        #: The broker's own requests (a replica's copies from its master, forwarded
        #: logical-queue requests, ...): their answers may be as large as its frames.
        self.client = RemotingClient(credentials=Credentials(*own) if own else None,
                                     tls=config.tls_client,
                                     max_frame_size=config.max_frame_size)
        #: Parked pulls: single pulls and batch-protocol parents alike.
        self.holds = HoldTable()
        self.broker_addr = config.broker_addr
        #: broker name -> address, for forwarding logical-queue requests
        self.broker_addresses: dict[str, str] = {}
        #: Called after the topic table changed (the registrar re-registers soon); what a
        #: listener returns is done once the name servers have the change.
        self.on_topics_changed: list[Callable[[], Awaitable[None] | None]] = []
        self._background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ events

    def topics_changed(self) -> list[Awaitable[None]]:
        """Write the table on a thread if a change left it to be written
        (:class:`~tidemq.broker.table_file.TableFile`: thousands of topics take a while to
        encode, and the loop serves on meanwhile), tell the store and the listeners;
        returns what is done once the file and the name servers have the new table (a
        request that changed it may answer after that)."""
        written: list[Awaitable[None]] = []
        if self.topics.file.pending:  # else every change is written already
            write = self.topics.file.write_soon()
            if write is not None:
                written.append(write)
        self.sync_queue_types()
        return written + [done for listener in self.on_topics_changed
                          if (done := listener()) is not None]

    async def routes_published(self, pending: list[Awaitable[None]]) -> None:
        """Wait until the name servers have a topic change (what :meth:`topics_changed`
        returned), at most :data:`ROUTE_WAIT` seconds: a request that created a topic
        answers after that, as RocketMQ's broker registers before it answers. A name
        server that does not answer in time is left to the registrar's retries."""
        if pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ROUTE_WAIT):
                    await asyncio.gather(*(asyncio.shield(done) for done in pending))

    def sync_queue_types(self) -> None:
        """Tell the store which topics index with BatchConsumeQueues (queue.type=BatchCQ):
        the few the topic manager keeps, not a walk of every topic."""
        for name in self.topics.batch_cq:
            if not self.store.is_batch_topic(name):
                self.store.set_batch_topic(name)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A consumer offset: LMQ offsets live in the LMQ store, keyed by queue and group."""
        lmq = self.store.lmq
        if lmq is not None and topic.startswith(LMQ_PREFIX):
            lmq.commit_offset(group, topic, offset)
        else:
            self.offsets.commit(group, topic, queue_id, offset)
        if not self.replication.role.is_master:
            self.carried_offsets.took(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        lmq = self.store.lmq
        if lmq is not None and topic.startswith(LMQ_PREFIX):
            return lmq.committed_offset(group, topic)
        return self.offsets.query(group, topic, queue_id)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance now (oneway, remoting.md §2.6)."""
        loop = asyncio.get_running_loop()
        for channel in self.consumers.channels(group):
            cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                          {"consumerGroup": group}, oneway=True)
            if channel.conn.is_open:
                task = loop.create_task(_oneway(channel.conn, cmd))
                self._background.add(task)
                task.add_done_callback(self._background.discard)



async def _oneway(conn: Connection, cmd: RemotingCommand) -> None:
    with contextlib.suppress(TideMQError):
        await conn.oneway(cmd)

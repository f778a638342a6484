"""BrokerApp: wires the store, the remoting server, the processors and background tasks.

Lifecycle: :meth:`start` binds the server (so ``listenPort=0`` learns its port), starts
the store with that advertised address (offset message ids must decode to it), loads the
metadata, registers processors and hooks, then registers with the name servers.
:meth:`stop` unregisters, answers held pulls, drains the server, persists metadata and
shuts the store down cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from tidemq.broker.clients import ConsumerManager, ProducerManager
from tidemq.broker.config import BrokerConfig
from tidemq.broker.delay import DelayPolicy, parse_delay_levels
from tidemq.broker.groups import SubscriptionGroupManager
from tidemq.broker.locks import LockTable
from tidemq.broker.logical import LogicalQueues, TopicMapping
from tidemq.broker.long_poll import DispatchLinger, PullHoldService
from tidemq.broker.metrics import BrokerMetrics
from tidemq.broker.offsets import OffsetManager
from tidemq.broker.processors.admin import AdminProcessor, disk_usage_ratio, uptime_text
from tidemq.broker.processors.batch import BatchProcessor
from tidemq.broker.processors.client import ClientProcessor
from tidemq.broker.processors.groups import GroupProcessor
from tidemq.broker.processors.lock import LockProcessor
from tidemq.broker.processors.logical import LogicalProcessor, logical_topic_config
from tidemq.broker.processors.offsets import OffsetProcessor
from tidemq.broker.processors.pull import PullProcessor
from tidemq.broker.processors.retry import RetryProcessor
from tidemq.broker.processors.send import SendProcessor
from tidemq.broker.registrar import Registrar
from tidemq.broker.schedule import ScheduleService
from tidemq.broker.stats import BrokerStats
from tidemq.broker.topics import TopicManager
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ConnectionLost, TideMQError
from tidemq.formats.record import HostAddr, pack_host
from tidemq.net import Connection, RemotingClient, RemotingServer
from tidemq.net.http import MetricsHttpServer
from tidemq.store.config import StoreConfig
from tidemq.store.layout import StoreLayout
from tidemq.store.lmq_store import LMQ_PREFIX
from tidemq.store.message_store import MessageStore

__all__ = ["BrokerApp"]

log = logging.getLogger(__name__)


class BrokerApp:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig) -> None:
        self.config = config
        self.store_config = store_config
        self.layout = StoreLayout(store_config.store_path_root_dir)
        self.store = MessageStore(store_config)
        self.topics = TopicManager(self.layout, broker_name=config.broker_name,
                                   cluster_name=config.broker_cluster_name,
                                   auto_create=config.auto_create_topic_enable,
                                   default_queue_nums=config.default_topic_queue_nums)
        self.offsets = OffsetManager(self.layout)
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
        self.metrics = BrokerMetrics(self)
        self.metrics_server: MetricsHttpServer | None = None
        self.server = RemotingServer("0.0.0.0", config.listen_port,
                                     max_frame_size=config.max_frame_size)
        self.client = RemotingClient()
        self.pull = PullProcessor(self)
        self.send = SendProcessor(self)
        self.pull_holds = PullHoldService(self.pull.rerun)
        self.batch: BatchProcessor | None = None
        self.dispatch_linger: DispatchLinger | None = None
        self.registrar: Registrar | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self.broker_addr = config.broker_addr
        self.logical = LogicalQueues(self.layout.config_file("logicalQueues.json"))
        #: broker name -> address, for forwarding logical-queue requests
        self.broker_addresses: dict[str, str] = {}
        self.started = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.server.start()
        self.broker_addr = f"{self.config.broker_ip1}:{self.server.port}"
        self.broker_addresses[self.config.broker_name] = self.broker_addr
        try:
            self.store.store_host = pack_host(self.broker_addr)
        except ValueError:
            self.store.store_host = HostAddr(b"\x7f\x00\x00\x01", self.server.port)
        try:
            loop = asyncio.get_running_loop()
            self.topics.load()
            self.logical.load()
            self._sync_queue_types()
            report = await loop.run_in_executor(None, self.store.start)
            log.info("store ready: %s", report)
            self.topics.persist()
            self.offsets.load()
            self.subscription_groups.load()
            self.schedule.start()
        except BaseException:
            await self.server.close(0)
            raise
        self.pull_holds.attach(loop)
        self.store.add_dispatch_hook(self.pull_holds.on_dispatched)
        for proc in (self.send, self.pull, OffsetProcessor(self), ClientProcessor(self),
                     AdminProcessor(self), RetryProcessor(self), LockProcessor(self),
                     GroupProcessor(self)):
            proc.register(self.server)
        self.logical_processor = LogicalProcessor(self)
        self.logical_processor.register(self.server)  # wraps send/pull/offsets: after them
        if self.config.batch_protocol_enable:  # last: it runs children through the others
            self.batch = BatchProcessor(self)
            self.batch.register(self.server)
        self._wire_dispatch_linger()
        self.server.on_connection_closed(self._connection_closed)
        if self.config.metrics_port:
            self.metrics.time_processors(self.server)
            metrics = MetricsHttpServer(self.metrics.render, "0.0.0.0", self.config.metrics_port)
            try:
                await metrics.start()
                self.metrics_server = metrics
            except OSError as exc:  # metrics are auxiliary: serve messages without them
                log.error("metricsPort %d: cannot serve metrics: %s", self.config.metrics_port, exc)
        self.registrar = Registrar(
            self.client, self.config.namesrv_addrs, cluster=self.config.broker_cluster_name,
            broker_name=self.config.broker_name, broker_id=self.config.broker_id,
            broker_addr=lambda: self.broker_addr, topics=self.topics.wrapper,
            period_ms=self.config.register_name_server_period)
        if self.config.namesrv_addrs:
            await self.registrar.register_all()
            self.registrar.start()
        self._tasks.append(loop.create_task(self._housekeeping(), name="broker-housekeeping"))
        self.started = True
        log.info("broker %s (%s) serving on %s", self.config.broker_name,
                 self.config.broker_cluster_name, self.broker_addr)

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.registrar is not None:
            await self.registrar.stop()
            if self.config.namesrv_addrs:
                await self.registrar.unregister_all()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        self.pull_holds.release_all()
        if self.batch is not None:
            self.batch.release_all()
        if self.dispatch_linger is not None:
            self.dispatch_linger.close()
        await self.server.close(drain_timeout=5.0)
        await self.client.close()
        self.offsets.persist()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.schedule.stop)
        await loop.run_in_executor(None, self.store.shutdown)
        self.schedule.persist()  # the final delivery progress, now that the log is flushed
        log.info("broker %s stopped", self.config.broker_name)

    def _wire_dispatch_linger(self) -> None:
        """``skipDispatchLingerWhenHeld``: held pulls switch the dispatcher's linger off."""
        dispatcher = self.store.dispatcher
        if (not self.config.skip_dispatch_linger_when_held or dispatcher is None
                or not dispatcher.linger):
            return
        batch = self.batch

        def waiting() -> bool:
            return bool(self.pull_holds.held_count or (batch and batch.holds.held_count))

        linger = self.dispatch_linger = DispatchLinger(dispatcher, waiting)
        self.pull_holds.on_hold = linger.held
        if batch is not None:
            batch.holds.on_hold = linger.held

    async def __aenter__(self) -> BrokerApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ events

    def logical_changed(self, mapping: TopicMapping | None, topic: str | None = None) -> None:
        """A logical-queue mapping changed: register the topic's physical queues and its
        ``logical.queues`` attribute so the name server publishes the placeholder route."""
        if mapping is not None:
            self.topics.upsert(logical_topic_config(mapping, self.config.broker_name))
            self.logical_processor.notify(mapping.topic)
        elif topic is not None:
            self.topics.delete(topic)
        self.topics_changed()

    def topics_changed(self) -> None:
        self._sync_queue_types()
        if self.registrar is not None:
            self.registrar.register_soon()

    def _sync_queue_types(self) -> None:
        """Tell the store which topics index with BatchConsumeQueues (queue.type=BatchCQ)."""
        for name in self.topics.topics:
            if self.topics.is_batch_cq(name) and not self.store.is_batch_topic(name):
                self.store.set_batch_topic(name)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """A consumer offset: LMQ offsets live in the LMQ store, keyed by queue and group."""
        lmq = self.store.lmq
        if lmq is not None and topic.startswith(LMQ_PREFIX):
            lmq.commit_offset(group, topic, offset)
        else:
            self.offsets.commit(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        lmq = self.store.lmq
        if lmq is not None and topic.startswith(LMQ_PREFIX):
            return lmq.committed_offset(group, topic)
        return self.offsets.query(group, topic, queue_id)

    def _connection_closed(self, conn: Connection, error: ConnectionLost) -> None:
        self.pull_holds.drop_connection(conn)
        self.producers.drop_connection(conn)
        for group in self.consumers.drop_connection(conn):
            self.notify_consumer_ids_changed(group)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance now (oneway, remoting.md §2.6)."""
        loop = asyncio.get_running_loop()
        for channel in self.consumers.channels(group):
            cmd = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                          {"consumerGroup": group}, oneway=True)
            if channel.conn.is_open:
                task = loop.create_task(self._oneway(channel.conn, cmd))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    @staticmethod
    async def _oneway(conn: Connection, cmd: RemotingCommand) -> None:
        with contextlib.suppress(TideMQError):
            await conn.oneway(cmd)

    async def _housekeeping(self) -> None:
        interval = self.config.flush_consumer_offset_interval / 1000
        idle = self.config.channel_expired_timeout / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.offsets.persist()
            except OSError as exc:
                log.error("persisting consumer offsets failed: %s", exc)
            self.producers.expire(idle)
            for group in self.consumers.expire(idle):
                self.notify_consumer_ids_changed(group)
            if self.logical.mappings:
                self.logical_processor.expire_segments()

    # ------------------------------------------------------------------ status

    def runtime_info(self) -> dict[str, str]:
        store = self.store
        behind, lag_ms = store.dispatch_lag()
        stats = self.stats
        return {
            "brokerVersionDesc": "TideMQ 0.1.0 (V5_3_3 protocol)",
            "brokerName": self.config.broker_name,
            "brokerAddr": self.broker_addr,
            "runtime": uptime_text(stats.started),
            "bootTimestamp": str(int(stats.started * 1000)),
            "storeStatus": store.status,
            "putTps": f"{stats.put_msgs.rate():.1f}",
            "getTransferedTps": f"{stats.get_msgs.rate():.1f}",
            "msgPutTotalTodayNow": str(stats.put_msgs.total),
            "msgGetTotalTodayNow": str(stats.get_msgs.total),
            "commitLogMinOffset": str(store.commitlog.min_offset),
            "commitLogMaxOffset": str(store.commitlog.max_offset),
            "commitLogDiskRatio": f"{disk_usage_ratio(str(self.layout.root)):.4f}",
            "dispatchBehindBytes": str(behind),
            "dispatchLagMs": f"{lag_ms:.0f}",
            "pullHeldCount": str(self.pull_holds.held_count),
            "topicCount": str(len(self.topics.topics)),
            "connectionCount": str(len(self.server.connections)),
            "earliestMessageTimeStamp": str(int(time.time() * 1000)),
            **self._lmq_info(),
        }

    def _lmq_info(self) -> dict[str, str]:
        lmq = self.store.lmq
        if lmq is None:
            return {"lmqEnabled": "false"}
        queues, entries = lmq.cached_stats()
        return {"lmqEnabled": "true", "lmqCount": str(queues), "lmqEntries": str(entries)}

"""BrokerApp: wires the store, the remoting server, the processors and background tasks.

Lifecycle: :meth:`start` binds the server's port without accepting on it (so
``listenPort=0`` learns its port), starts the store with that advertised address (offset
message ids must decode to it), loads the metadata, registers processors and hooks, and
only then accepts connections -- a client connecting earlier is refused, as by a broker
that is down, and tries again, instead of getting REQUEST_CODE_NOT_SUPPORTED -- and
registers with the name servers.
:meth:`stop` unregisters, answers held pulls, drains the server, persists metadata and
shuts the store down cleanly.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Callable, Sequence

from tidemq.broker.acting_master import ActingMaster
from tidemq.broker.codes import SEND_CODES
from tidemq.broker.config import BrokerConfig
from tidemq.broker.context import BrokerContext
from tidemq.broker.controller_link import ControllerLink
from tidemq.broker.long_poll import DispatchLinger
from tidemq.broker.metrics import BrokerMetrics
from tidemq.broker.pipeline import Interceptor, Pipeline
from tidemq.broker.processors.admin import AdminProcessor
from tidemq.broker.processors.auth import AuthProcessor
from tidemq.broker.processors.batch import BatchProcessor
from tidemq.broker.processors.client import ClientProcessor
from tidemq.broker.processors.config import ConfigProcessor
from tidemq.broker.processors.consume_directly import ConsumeDirectlyProcessor
from tidemq.broker.processors.epochs import EpochCacheProcessor
from tidemq.broker.processors.groups import GroupProcessor
from tidemq.broker.processors.inspection import InspectionProcessor
from tidemq.broker.processors.lock import LockProcessor
from tidemq.broker.processors.logical import LogicalProcessor
from tidemq.broker.processors.maintenance import MaintenanceProcessor
from tidemq.broker.processors.offsets import OffsetProcessor
from tidemq.broker.processors.pull import PullProcessor
from tidemq.broker.processors.replication import SlaveSyncProcessor
from tidemq.broker.processors.retry import RetryProcessor
from tidemq.broker.processors.running_info import RunningInfoProcessor
from tidemq.broker.processors.send import SendProcessor
from tidemq.broker.processors.stats import StatsProcessor
from tidemq.broker.processors.transaction import TransactionProcessor, transaction_topic
from tidemq.broker.registrar import Registrar
from tidemq.broker.replication.metadata import MetadataSync
from tidemq.broker.replication.metadata_push import MetadataPush
from tidemq.broker.replication.reclaim import RECLAIM_TIMEOUT, ProgressReclaim
from tidemq.broker.replication.role import RoleHolder, RoleState
from tidemq.broker.runtime_config import registered_topics
from tidemq.broker.status import runtime_info
from tidemq.broker.stored_topics import adoptable
from tidemq.broker.topic_deletion import finish_pending
from tidemq.broker.transaction_check import TransactionChecker
from tidemq.broker.transaction_escape import TransactionEscape
from tidemq.broker.transaction_escape_metrics import TransactionEscapeCollector
from tidemq.codec.bodies import TopicConfigSerializeWrapper
from tidemq.errors import ConnectionLost
from tidemq.formats.record import HostAddr, pack_host
from tidemq.net import Connection
from tidemq.net.acl import AclFile, AclGate
from tidemq.net.acl.metrics import AclCollector
from tidemq.net.acl.migrate import migrate_rules
from tidemq.net.acl.policy import User, UserType, to_acl_info
from tidemq.net.acl.users import UserDirectory
from tidemq.net.bind import warn_if_exposed
from tidemq.net.http import MetricsHttpServer, start_metrics
from tidemq.net.tasks import cancel_and_wait
from tidemq.store.config import StoreConfig

__all__ = ["BrokerApp"]

log = logging.getLogger(__name__)


class BrokerApp:
    def __init__(self, config: BrokerConfig, store_config: StoreConfig, *,
                 interceptors: Sequence[Interceptor] = ()) -> None:
        """``interceptors``: request interceptors run before the broker's own, outermost
        first (:mod:`tidemq.broker.pipeline`), after the ACL's (``aclEnable``)."""
        ctx = self.ctx = BrokerContext(config, store_config)
        #: The ACL 2.0 users and policies (served whatever ACL model is on).
        self.auth_store = ctx.auth
        #: The ACL interceptor (``aclEnable`` or ``authenticationEnabled``), outermost of
        #: all: one gate and one permission table for both models.
        self.acl: AclGate | None = None
        lookups = {"transaction": transaction_topic(ctx.transactions)}
        if config.acl_enable:
            self.acl = AclGate(AclFile(config.acl_file), lookups=lookups)
        elif config.authentication_enabled:
            self.acl = AclGate(UserDirectory(self.auth_store,
                                             authorize=config.authorization_enabled,
                                             cluster=config.broker_cluster_name),
                               lookups=lookups)
        if self.acl is not None:  # replicas prove who they are against the same principals
            ctx.replication.auth.directory = self.acl.directory
        self._interceptors = tuple(interceptors)
        self.pipeline = Pipeline()
        self.config = config
        self.store_config = store_config
        self.layout = ctx.layout
        self.store = ctx.store
        self.topics = ctx.topics
        self.offsets = ctx.offsets
        self.subscription_groups = ctx.subscription_groups
        self.producers = ctx.producers
        self.consumers = ctx.consumers
        self.locks = ctx.locks
        self.schedule = ctx.schedule
        self.stats = ctx.stats
        self.logical = ctx.logical
        self.server = ctx.server
        self.client = ctx.client
        self.broker_addresses = ctx.broker_addresses
        self.metrics = BrokerMetrics(ctx)
        if self.acl is not None:
            self.metrics.registry.register(AclCollector(self.acl, "tidemq_broker"))
        self.metrics_server: MetricsHttpServer | None = None
        self.pull = PullProcessor(ctx)
        self.send = SendProcessor(ctx)
        #: Parked pulls, single and batch-protocol (:mod:`tidemq.broker.holds`).
        self.pull_holds = ctx.holds
        self.batch: BatchProcessor | None = None
        self.dispatch_linger: DispatchLinger | None = None
        self.registrar: Registrar | None = None
        self.logical_processor = LogicalProcessor(ctx)
        #: A replica's copy of its master's metadata (idle on a master).
        self.metadata_sync = MetadataSync(ctx)
        #: ``slaveActingMaster``: a replica standing in for its master.
        self.acting_master = ActingMaster(ctx)
        self.reclaim = ProgressReclaim(ctx)
        if config.slave_acting_master:
            ctx.schedule.acting = lambda: self.acting_master.now_acting
            ctx.schedule.escape = self.acting_master.escape_due
        self.metadata_sync.on_mapping = self.logical_processor.mapping_changed
        #: Controller mode (``enableControllerMode``): the role comes from the controllers.
        self.controller_link: ControllerLink | None = None
        if config.enable_controller_mode:
            self.controller_link = ControllerLink(
                self.client, config, self.store, ctx.replication.role,
                broker_addr=lambda: self.broker_addr,
                ha_address=lambda: self.ctx.replication.ha_address,
                max_gap_not_in_sync=config.ha_max_gap_not_in_sync,
                lease=ctx.replication.lease, standing=ctx.replication.standing,
                copies_here=ctx.replication.copies_here)
        #: Controller mode: topic and group changes reach the in-sync replicas at once.
        self.metadata_push: MetadataPush | None = None
        if self.controller_link is not None:
            self.metadata_push = MetadataPush(ctx, self.metadata_sync,
                                              self.controller_link.in_sync_replicas)
            self.controller_link.on_master = self.metadata_sync.master_known
        #: Asks producers about the transactions they left open.
        self.transaction_escape = (TransactionEscape(ctx, self.acting_master)
                                   if config.slave_acting_master else None)
        if self.transaction_escape is not None:
            self.metrics.registry.register(TransactionEscapeCollector(self.transaction_escape))
        self.transaction_checker = TransactionChecker(ctx, self.transaction_escape)
        #: Whether the role last seen by :meth:`_master_on_role` was master's.
        self._master_role = ctx.replication.role.state.role.is_master
        self._tasks: list[asyncio.Task[None]] = []
        ctx.on_topics_changed.append(self._register_soon)
        self.started = False

    @property
    def broker_addr(self) -> str:
        return self.ctx.broker_addr

    @broker_addr.setter
    def broker_addr(self, addr: str) -> None:
        self.ctx.broker_addr = addr

    def _registered_topics(self) -> TopicConfigSerializeWrapper:
        """The topics as registered: limited to the broker's permission
        (``brokerPermission`` may change at run time)."""
        return registered_topics(self.topics.wrapper(), self.ctx.config.broker_permission)

    @property
    def role(self) -> RoleHolder:
        """The broker's role in its group; a controller changes it here
        (``docs/replication.md``)."""
        return self.ctx.replication.role

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.server.start(serving=False)
        warn_if_exposed(log, "the broker", self.config.bind_address,
                        acl=self.acl is not None and not (
                            self.config.authentication_enabled
                            and not self.config.authorization_enabled))
        self.broker_addr = f"{self.config.advertised_host}:{self.server.port}"
        self.broker_addresses[self.config.broker_name] = self.broker_addr
        try:
            self.store.store_host = pack_host(self.broker_addr)
        except ValueError:
            self.store.store_host = HostAddr(b"\x7f\x00\x00\x01", self.server.port)
        try:
            loop = asyncio.get_running_loop()
            self.topics.load()
            self.logical.load()
            self._load_auth()
            self.ctx.sync_queue_types()
            if self.controller_link is not None:  # may ask recovery to cut a divergent tail
                await self.controller_link.prepare()
            report = await loop.run_in_executor(None, self.store.start)
            log.info("store ready: %s", report)
            self.topics.persist()
            self.offsets.load()
            self.subscription_groups.load()
            finish_pending(self.ctx)  # topic deletions the last stop cut off
            reclaim = self._reclaims()
            if reclaim:
                self.schedule.hold()  # delivers once the replicas' progress is back
            self.schedule.start()
            await loop.run_in_executor(None, self.ctx.transactions.rebuild)
            await self.ctx.replication.start()
        except BaseException:
            await self.ctx.replication.stop()
            await self.server.close(0)
            await asyncio.to_thread(self._stop_store_after_failed_start)
            raise
        self.pull_holds.attach(loop)
        self.store.add_dispatch_round_hook(self.pull_holds.on_round)
        self.store.dispatch_soon(_soon_on(loop))
        self._build_pipeline()
        self._wire_dispatch_linger()
        self.server.on_connection_closed(self._connection_closed)
        self.metrics_server = await start_metrics(
            self.config, self.metrics.render_async, server="the broker", logger=log,
            reach="read its metrics (topic, group and client names, rates)")
        await self.logical_processor.sync_at_start()
        await self.server.serve()  # ready: every processor is registered
        if reclaim:
            await self._reclaim()
        self.registrar = Registrar(
            self.client, self.config.namesrv_addrs, cluster=self.config.broker_cluster_name,
            broker_name=self.config.broker_name, broker_id=self.role.state.broker_id,
            broker_addr=lambda: self.broker_addr, topics=self._registered_topics,
            period_ms=self.config.register_name_server_period,
            ha_addr=lambda: self.ctx.replication.ha_address)
        self.role.add_listener(self._role_changed)
        self.role.add_listener(self._master_on_role)
        self.registrar.on_master_addr.append(self.metadata_sync.master_known)
        self.metadata_sync.ask_master = self.registrar.register_soon
        if self.config.namesrv_addrs:
            await self.registrar.register_all()
            self.registrar.start()
        if self.controller_link is not None:
            self.controller_link.start()
        self._tasks.append(loop.create_task(self._housekeeping(), name="broker-housekeeping"))
        self.transaction_checker.start()
        self._tasks.append(loop.create_task(self.metadata_sync.run(), name="broker-slave-sync"))
        if self.config.slave_acting_master:
            self._tasks.append(loop.create_task(self.acting_master.watch(),
                                                name="broker-acting-master"))
        # Keep comparing logical-queue mappings with the peers (caught up once above).
        self._tasks.append(loop.create_task(self.logical_processor.run_sync(
            self.config.logical_sync_interval / 1000), name="broker-logical-sync"))
        self.started = True
        log.info("broker %s (%s) serving on %s", self.config.broker_name,
                 self.config.broker_cluster_name, self.broker_addr)

    def _stop_store_after_failed_start(self) -> None:
        """A start that failed once the store ran (a table file that does not read ...)
        leaves nothing running: the store holds its directory's lock, and an embedder
        could not start a broker on it again in this process."""
        self.schedule.stop()
        self.store.shutdown()

    def _reclaims(self) -> bool:
        """Whether this broker takes back its replicas' progress before it registers: a
        master of a static group with ``slaveActingMaster`` (upstream's pre-online step)."""
        cfg = self.config
        return (cfg.slave_acting_master and self.role.is_master and bool(cfg.namesrv_addrs)
                and self.controller_link is None)

    async def _reclaim(self) -> None:
        try:
            async with asyncio.timeout(RECLAIM_TIMEOUT):
                await self.reclaim.run()
        except TimeoutError:
            log.warning("taking back the replicas' progress took over %.0f s: this master "
                        "starts with what it has", RECLAIM_TIMEOUT)
        finally:
            self.schedule.release()

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self.controller_link is not None:
            await self.controller_link.stop()
        await self.transaction_checker.stop()
        await cancel_and_wait(*self._tasks)
        if self.registrar is not None:
            await self.registrar.stop()
            if self.config.namesrv_addrs:
                await self.registrar.unregister_all()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        self.pull_holds.release_all()
        self.store.dispatch_soon(None)  # the loop is ending: the dispatch thread takes over
        if self.dispatch_linger is not None:
            self.dispatch_linger.close()
        await self.server.close(drain_timeout=5.0)
        await self.ctx.replication.stop()
        await self.client.close()
        self.ctx.transactions.save_progress()
        self.topics.file.write_pending()
        self.subscription_groups.file.write_pending()  # an auto-created group not written yet
        self.offsets.persist()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.schedule.stop)
        await loop.run_in_executor(None, self.store.shutdown)
        self.schedule.persist()  # the final delivery progress, now that the log is flushed
        log.info("broker %s stopped", self.config.broker_name)

    def _load_auth(self) -> None:
        self.auth_store.load()
        init = self.config.init_user
        if init is not None and self.auth_store.ensure_user(
                User(init[0], init[1], UserType.SUPER)):
            log.info("initAuthenticationUser: Super user %s created", init[0])
        if self.config.migrate_auth_from_v1_enabled:
            rules = AclFile(self.config.acl_file).rules()
            for user, acl in migrate_rules(rules):
                if self.auth_store.ensure_user(user):
                    if acl is not None:
                        self.auth_store.put_acl(acl.subject, to_acl_info(acl), create=True)
                    log.info("migrateAuthFromV1Enabled: account %s is now a user",
                             user.username)

    def _build_pipeline(self) -> None:
        """Every handler and every interceptor of the broker, registered here and only
        here (:mod:`tidemq.broker.pipeline`)."""
        ctx = self.ctx
        pipeline = self.pipeline
        for proc in (self.send, self.pull, OffsetProcessor(ctx), ClientProcessor(ctx),
                     AdminProcessor(ctx), RetryProcessor(ctx, self.acting_master),
                     LockProcessor(ctx), GroupProcessor(ctx), AuthProcessor(self.auth_store),
                     SlaveSyncProcessor(ctx), EpochCacheProcessor(ctx), ConfigProcessor(ctx),
                     StatsProcessor(ctx), MaintenanceProcessor(ctx), RunningInfoProcessor(ctx),
                     ConsumeDirectlyProcessor(ctx), InspectionProcessor(ctx),
                     TransactionProcessor(ctx, self.transaction_escape),
                     self.logical_processor):
            proc.register(pipeline)
        if self.metadata_push is not None:
            self.metadata_push.register(pipeline)
        if self.config.batch_protocol_enable:
            self.batch = BatchProcessor(ctx, pipeline, self.pull, self.send)
            self.batch.register(pipeline)
        # Outermost first: the ACL, gates given by the embedder, then metrics (timing
        # everything a request costs), then (controller mode) the metadata push, then
        # the logical-queue translation.
        if self.acl is not None:
            pipeline.intercept(self.acl)
        pipeline.intercept(*self._interceptors)
        if self.config.metrics_port:
            pipeline.intercept(self.metrics)
        if self.metadata_push is not None:  # answers a change once replicas hold it
            pipeline.intercept(self.metadata_push)
        pipeline.intercept(self.logical_processor)
        pipeline.install(self.server)
        # Sends read their bodies while they run (a logical queue's forwarded send
        # copies its own): the body's copy out of the receive buffer is saved.
        self.server.lend_bodies(SEND_CODES)

    def _wire_dispatch_linger(self) -> None:
        """``skipDispatchLingerWhenHeld``: held pulls switch the dispatcher's linger off."""
        dispatcher = self.store.dispatcher
        if (not self.config.skip_dispatch_linger_when_held or dispatcher is None
                or not dispatcher.linger):
            return
        holds = self.pull_holds
        linger = self.dispatch_linger = DispatchLinger(dispatcher, lambda: bool(
            holds.held_count))
        holds.on_hold = linger.held

    async def __aenter__(self) -> BrokerApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ events

    def _role_changed(self, state: RoleState) -> None:
        """Name servers learn the new brokerId at once, and in controller mode the epoch
        as the registration's state version (a name server keeps an id with the broker
        of the later state: an old master does not take the routes back)."""
        if state.epoch:
            self.topics.set_state_version(state.epoch)
        if self.registrar is not None:
            self.registrar.broker_id = state.broker_id
            self.registrar.register_soon()

    async def _master_on_role(self, state: RoleState) -> None:
        """A replica that becomes master serves the topics and holds the transactions of
        the log it copied."""
        if not state.role.is_master or self._master_role:
            self._master_role = state.role.is_master
            return
        self._master_role = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.store.wait_dispatched, 10.0)
        await self._adopt_stored_topics()
        self.ctx.transactions.rebuild()

    async def _adopt_stored_topics(self) -> None:
        """Configs for the topics the copied log holds messages of but the last copy of
        the master's topic table lacked (:mod:`tidemq.broker.stored_topics`)."""
        topics = self.ctx.topics
        adopted = adoptable(topics.topics, self.store.topics(),
                            is_batch=self.store.is_batch_topic,
                            default_queue_nums=self.config.default_topic_queue_nums)
        for tc in adopted:
            topics.upsert(tc)
            log.warning("topic %s has messages in the copied log but no config here (created "
                        "on the old master after this broker's last copy of its topics): "
                        "serving it with %d queues", tc.topic_name, tc.read_queue_nums)
        if adopted:
            await self.ctx.routes_published(self.ctx.topics_changed())

    def _register_soon(self) -> asyncio.Future[None] | None:
        return self.registrar.register_soon() if self.registrar is not None else None

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.ctx.committed_offset(group, topic, queue_id)

    def _connection_closed(self, conn: Connection, error: ConnectionLost) -> None:
        self.pull_holds.drop_connection(conn)
        self.producers.drop_connection(conn)
        for group in self.consumers.drop_connection(conn):
            self.ctx.notify_consumer_ids_changed(group)

    async def _housekeeping(self) -> None:
        interval = self.config.flush_consumer_offset_interval / 1000
        idle = self.config.channel_expired_timeout / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.offsets.persist)  # the loop serves on meanwhile
            except OSError as exc:
                log.error("persisting consumer offsets failed: %s", exc)
            self.stats.roll_day(datetime.date.today())
            self.producers.expire(idle)
            for group in self.consumers.expire(idle):
                self.ctx.notify_consumer_ids_changed(group)
            if self.logical.mappings:
                self.logical_processor.expire_segments()

    # ------------------------------------------------------------------ status

    def runtime_info(self) -> dict[str, str]:
        return runtime_info(self.ctx)


def _soon_on(loop: asyncio.AbstractEventLoop) -> Callable[[Callable[[], None]], bool]:
    """``call_soon`` on ``loop`` when called on its thread (the caller's), ``False``
    elsewhere: how the store leaves a put's small dispatch round to the end of the loop's
    pass."""
    thread = threading.get_ident()

    def soon(fn: Callable[[], None]) -> bool:
        if threading.get_ident() != thread:
            return False
        loop.call_soon(fn)
        return True

    return soon

"""Broker settings under RocketMQ's key names, loaded with the store's from one file.

A RocketMQ ``broker.properties`` mixes broker keys (``brokerName``, ``listenPort``,
``namesrvAddr`` ...) and store keys (``storePathRootDir``, ``flushDiskType`` ...). Both are
read here; a key known to neither is reported as unknown, never silently ignored.

Precedence, lowest first: defaults, the ``.properties`` file, the keys changed at run time
and kept in the store's ``config/runtimeOverrides.properties``
(:mod:`tidemq.broker.config_overrides`), ``TIDEMQ_<KEY>`` environment variables
(``TIDEMQ_LISTENPORT=10911`` or ``TIDEMQ_LISTEN_PORT``), explicit overrides (command-line
flags).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemq.broker.config_overrides import overrides_path, read_overrides
from tidemq.broker.replication.role import BrokerRole
from tidemq.broker.replication.standing import QuorumLossMode
from tidemq.errors import ConfigError
from tidemq.formats.javaprops import bind, config_keys, env_values, read_properties
from tidemq.net.acl.auth_keys import inner_credentials
from tidemq.net.bind import advertised_host, check_listen
from tidemq.net.server_keys import ServerKeys
from tidemq.store.config import StoreConfig
from tidemq.store.kept_overrides import shown_keys, shown_of

__all__ = ["BrokerConfig", "load_broker_config"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerConfig(ServerKeys):
    #: The cluster this broker registers in; stored in each message's ``CLUSTER`` property.
    broker_cluster_name: str = "DefaultCluster"
    #: The broker group's name: a master and its replicas share it (not empty).
    broker_name: str = "broker-a"
    #: 0 for a master, 1 or more for a replica (see ``enableControllerMode`` for controller mode).
    broker_id: int = 0
    #: The host advertised to name servers and clients (empty: derived from
    #: ``bindAddress``, see :mod:`tidemq.net.bind`).
    broker_ip1: str = dataclasses.field(default="", metadata={"key": "brokerIP1"})
    #: The remoting port clients and other servers connect to, on ``bindAddress`` (0: any free
    #: port).
    listen_port: int = 10911
    #: The name servers this broker registers with, ``host:port;host:port`` (empty: none).
    namesrv_addr: str = ""
    #: A send to an unknown topic creates it, with the queues the producer asks for, at most
    #: ``defaultTopicQueueNums``.
    auto_create_topic_enable: bool = True
    #: A consumer group the broker does not know is created at its first heartbeat.
    auto_create_subscription_group: bool = True
    #: Queues of the template topic TBW102 when the broker creates it, and so the most a topic
    #: created by a send gets (1 or more). An existing TBW102 keeps its queues: change them
    #: with ``updateTopic``.
    default_topic_queue_nums: int = 8
    #: What the broker allows on all its topics: 6 read and write, 4 read only, 2 write only
    #: (no other value).
    broker_permission: int = 6
    #: How often the broker registers again with every name server, ms.
    register_name_server_period: int = 30_000
    #: A pull that finds nothing waits for a message up to the consumer's own suspend timeout
    #: (false: ``shortPollingTimeMills``).
    long_polling_enable: bool = True
    #: Without ``longPollingEnable``, how long a pull that finds nothing waits, ms.
    short_polling_time_mills: int = 1000
    #: The largest message body accepted, bytes (also the store's limit).
    max_message_size: int = 4 * 1024 * 1024
    #: A producer or consumer connection that has not heartbeated for this long is dropped from its
    #: group, ms.
    channel_expired_timeout: int = 120_000
    #: How often consumer offsets are written to the store's ``config`` directory, and silent
    #: clients dropped, ms. A commit of a group with no consumer online on the broker (an
    #: admin tool's, such as ``cloneGroupOffset``) is written before it is answered.
    flush_consumer_offset_interval: int = 5000
    #: Deliveries of a message a consumer sends back before it goes to the group's dead-letter
    #: topic, when the group and the request say no other number.
    max_reconsume_times: int = 16
    #: Delay levels 1, 2, ... of delayed messages (``DELAY``), space-separated durations with unit
    #: s, m, h or d.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: The furthest a timer message (``TIMER_DELIVER_MS``, ``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS``)
    #: may be delivered in the future, seconds; further is refused.
    timer_max_delay_sec: int = 3 * 86400
    #: Milliseconds a half (prepared) transactional message waits for END_TRANSACTION
    #: before the broker asks its producer group (CHECK_TRANSACTION_STATE), and between
    #: two such check-backs.
    transaction_time_out: int = 6000
    #: Check-backs per half message; one still unresolved after that many is discarded.
    transaction_check_max: int = 15
    #: Milliseconds between two passes of the transaction checker.
    transaction_check_interval: int = 30_000
    #: Refuse transactional (prepared) sends with NO_PERMISSION.
    reject_transaction_message: bool = False
    #: Stored in each message's ``MSG_REGION`` property and in trace records.
    region_id: str = "DefaultRegion"
    #: Stored in each message's ``TRACE_ON`` property: whether clients trace it.
    trace_on: bool = True
    #: Create the message-trace topic (``msgTraceTopicName``, one queue) at start, as
    #: upstream; clients with trace on send their trace records there.
    trace_topic_enable: bool = False
    #: The message-trace topic, created at start with ``traceTopicEnable``.
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    #: The largest remoting frame accepted or sent, bytes; a larger request is answered
    #: MESSAGE_ILLEGAL and skipped, the connection kept. The broker's own requests take
    #: answers this large too: a replica copies its master's tables (consumer offsets of
    #: many groups can pass 16 MiB) only when both allow their size, and clients read
    #: them with a limit of their own (``TIDEMQ_MAX_FRAME_SIZE``, ``max_frame_size``).
    max_frame_size: int = 16 * 1024 * 1024
    # TideMQ additions
    #: Receive-buffer bytes (incomplete frames, buffers kept between frames) held over all
    #: connections; past it kept buffers are dropped, then the connections holding the
    #: most for the longest are closed.
    max_incomplete_frame_bytes: int = 256 * 1024 * 1024
    #: The largest pull answer, bytes, when the request names no limit.
    max_pull_bytes: int = 4 * 1024 * 1024
    #: The largest size a compressed inner batch (RIP-26) may inflate to when the broker reads its
    #: messages' tags and keys, bytes.
    max_inner_batch_inflated_bytes: int = 32 * 1024 * 1024
    #: Serve the batch protocol (many queue requests in one request, docs/protocol.md).
    batch_protocol_enable: bool = True
    #: Export each group's lag per queue too (one series per group and queue).
    metrics_queue_lag: bool = False
    #: The most child requests one batch-protocol request may carry (1 or more).
    batch_max_children: int = 1000
    #: How long an orderly-consumption lock lives after its last renewal (upstream's
    #: ``rocketmq.broker.rebalance.lockMaxLiveTime``), ms.
    rebalance_lock_max_live_time: int = 60_000
    #: Largest batch-protocol parent body accepted, and the byte budget of the pulled
    #: records one merged pull response carries (capped by ``maxFrameSize``).
    batch_max_bytes: int = 8 * 1024 * 1024
    #: Switch the store dispatcher's linger (``dispatchLingerMs``) off while pulls are
    #: held: a held pull waits for the very round the linger delays.
    skip_dispatch_linger_when_held: bool = True
    #: How often a broker compares its logical-queue mappings with the other brokers'
    #: and takes in what it missed (also done once at start), ms.
    logical_sync_interval: int = 2000
    #: The account this broker signs its own requests with (to name servers and to other
    #: brokers), when they check ACLs; empty: unsigned. ``innerClientAuthenticationCredentials``
    #: says the same (upstream's ACL 2.0 key); these two win.
    access_key: str = ""
    #: The secret key of ``accessKey``.
    secret_key: str = dataclasses.field(default="", repr=False)
    #: ACL 2.0: at start, make a user and an ACL of every ``aclFile`` account that has no
    #: user of its name yet (:mod:`tidemq.net.acl.migrate`).
    migrate_auth_from_v1_enabled: bool = dataclasses.field(
        default=False, metadata={"key": "migrateAuthFromV1Enabled"})
    # Replication (docs/replication.md); RocketMQ's keys.
    #: ASYNC_MASTER, SYNC_MASTER or SLAVE; a master has brokerId 0, a replica another id.
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: The port replicas connect to (-1: listenPort + 1, or any free port when listenPort
    #: is 0), on ``bindAddress``.
    ha_listen_port: int = -1
    #: TideMQ: where replicas are told to connect, ``host:port``, when a proxy or a port
    #: mapping stands between them and ``haListenPort`` (empty: the advertised host and
    #: the HA port).
    ha_advertised_address: str = ""
    #: A replica's master, as the master's ``host:haListenPort`` (empty: none yet).
    ha_master_address: str = ""
    #: How often a replica reports its offset when nothing arrives, ms.
    ha_send_heartbeat_interval: int = 5000
    #: A replica connection silent for this long is closed, ms.
    ha_housekeeping_interval: int = 20_000
    #: Commit-log bytes per HA frame at most.
    ha_transfer_batch_size: int = 256 * 1024
    #: TideMQ: on a master that checks ACLs (``aclEnable``, ``authenticationEnabled``),
    #: let replicas that send no authentication frame copy the log (RocketMQ's own
    #: replicas cannot send one); off, such a connection is closed unserved.
    ha_allow_unauthenticated: bool = False
    #: TideMQ: a replica with credentials (``accessKey``, ``innerClientAuthenticationCredentials``)
    #: opens its HA connections with an authentication frame signed with them; false:
    #: never (a RocketMQ master would read the frame as a broken offset report).
    ha_auth_frame_enable: bool = True
    #: A replica more than this many bytes behind is not in sync.
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    #: Copies (the master included) that must hold a message before SYNC_MASTER answers
    #: (1 or more).
    in_sync_replicas: int = 2
    #: With ``enableAutoInSyncReplicas``: the fewest copies a send waits for.
    min_in_sync_replicas: int = 1
    #: Lower the copies waited for to the in-sync replicas present (never below
    #: ``minInSyncReplicas``) instead of answering SLAVE_NOT_AVAILABLE.
    enable_auto_in_sync_replicas: bool = False
    #: Wait for every in-sync replica, however many ``inSyncReplicas`` says.
    all_ack_in_sync_state_set: bool = False
    #: How long a SYNC_MASTER send waits for its replica copies, ms (FLUSH_SLAVE_TIMEOUT).
    slave_timeout: int = 3000
    #: Consumers may be told to pull from a replica (``suggestWhichBrokerId``).
    slave_read_enable: bool = False
    #: Messages further than this share (%) of the machine's memory behind the log's end
    #: count as on disk: with ``slaveReadEnable`` a pull reading them is told to go to a
    #: replica, and a queue whose message 0 is on disk is not young for a new group.
    access_message_in_memory_max_ratio: int = 40
    #: How often a replica copies topics, groups and offsets from its master, ms.
    slave_metadata_sync_interval: int = 10_000
    #: RocketMQ 5: while its group's master is down, the replica with the smallest
    #: brokerId hands messages consumers send back to another group's master.
    slave_acting_master: bool = dataclasses.field(
        default=False, metadata={"aliases": ("enableSlaveActingMaster",)})
    # Controller mode (docs/replication.md#controller-mode); RocketMQ 5's keys.
    #: Take the role from the controllers: ``brokerId`` is then this broker's id in its
    #: group (1, 2, ...; the name server lists the master as 0), ``brokerRole`` the kind
    #: of master it is when elected (SYNC_MASTER or ASYNC_MASTER).
    enable_controller_mode: bool = False
    #: The controllers' request addresses (name servers with the controller embedded, or
    #: standalone controllers), ``host:port;host:port``.
    controller_addr: str = ""
    #: How often the broker heartbeats to the controllers and asks for its group's
    #: master, ms (upstream's ``brokerHeartbeatInterval``, default 1000 there).
    broker_heartbeat_interval: int = 500
    #: The lease this broker asks for: not heard from for this long, it is taken for dead
    #: and, if master, replaced, ms (upstream's ``controllerHeartBeatTimeoutMills``); at
    #: least three ``brokerHeartbeatInterval``.
    controller_heart_beat_timeout_mills: int = 3000
    #: Among equally current replicas the lowest wins an election.
    broker_election_priority: int = 2**31 - 1
    #: TideMQ: what a master does once no quorum of controllers confirms it (its lease
    #: lapsed): ``STEP_DOWN``, or ``SYNC_STATE_SET_FOLLOWS`` -- go on acknowledging what
    #: every member of its sync-state set confirms it holds while following it
    #: (:mod:`tidemq.broker.replication.standing`).
    master_without_controller_quorum: QuorumLossMode = QuorumLossMode.STEP_DOWN
    def __post_init__(self) -> None:
        self.check_server_keys()
        for key, value in (("transactionTimeOut", self.transaction_time_out),
                           ("transactionCheckInterval", self.transaction_check_interval),
                           ("transactionCheckMax", self.transaction_check_max)):
            if value <= 0:
                raise ConfigError(f"{key} must be positive", key=key)
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("accessKey and secretKey go together",
                              key="secretKey" if self.access_key else "accessKey")
        if self.migrate_auth_from_v1_enabled and not (
                self.authentication_enabled and self.acl_file):
            raise ConfigError("migrateAuthFromV1Enabled=true needs authenticationEnabled=true "
                              "and aclFile (the plain_acl.yml to migrate)",
                              key="migrateAuthFromV1Enabled")
        self.credentials  # noqa: B018
        check_listen(self.bind_address, self.listen_port, self.metrics_port, self.broker_ip1)
        if not self.broker_name:
            raise ConfigError("brokerName must not be empty", key="brokerName")
        if self.broker_permission not in (2, 4, 6):
            raise ConfigError(f"brokerPermission must be 2, 4 or 6 (write, read, both), not "
                              f"{self.broker_permission}", key="brokerPermission")
        if self.default_topic_queue_nums < 1:
            raise ConfigError("defaultTopicQueueNums must be positive",
                              key="defaultTopicQueueNums")
        if self.enable_controller_mode:
            if self.broker_id < 1:
                raise ConfigError("in controller mode brokerId is the broker's id in its "
                                  "group, 1 or more (the name server lists the master as 0)",
                                  key="brokerId")
            if not self.controller_addrs:
                raise ConfigError("enableControllerMode=true needs controllerAddr",
                                  key="controllerAddr")
            if self.broker_heartbeat_interval < 1:
                raise ConfigError("brokerHeartbeatInterval must be positive",
                                  key="brokerHeartbeatInterval")
            if self.controller_heart_beat_timeout_mills < 3 * self.broker_heartbeat_interval:
                raise ConfigError("controllerHeartBeatTimeoutMills must be at least three "
                                  "brokerHeartbeatInterval: a master's lease is the timeout "
                                  "less two intervals, and is renewed every interval",
                                  key="controllerHeartBeatTimeoutMills")
            if (self.master_without_controller_quorum is QuorumLossMode.SYNC_STATE_SET_FOLLOWS
                    and self.broker_role is not BrokerRole.SYNC_MASTER):
                raise ConfigError("masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS needs "
                                  "brokerRole=SYNC_MASTER: a master without its lease "
                                  "acknowledges only what its replicas confirm they hold",
                                  key="masterWithoutControllerQuorum")
        elif self.master_without_controller_quorum is not QuorumLossMode.STEP_DOWN:
            raise ConfigError("masterWithoutControllerQuorum applies in controller mode only "
                              "(enableControllerMode=true)",
                              key="masterWithoutControllerQuorum")
        elif self.broker_role.is_master and self.broker_id != 0:
            raise ConfigError(f"a {self.broker_role.value} has brokerId 0, not "
                              f"{self.broker_id}", key="brokerId")
        elif not self.broker_role.is_master and self.broker_id == 0:
            raise ConfigError("a SLAVE needs a brokerId other than 0 (0 is the master's)",
                              key="brokerId")
        if self.in_sync_replicas < 1 or self.min_in_sync_replicas < 1:
            raise ConfigError("inSyncReplicas and minInSyncReplicas must be positive",
                              key="inSyncReplicas" if self.in_sync_replicas < 1
                              else "minInSyncReplicas")
        if self.ha_advertised_address:
            host, _, port = self.ha_advertised_address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"haAdvertisedAddress {self.ha_advertised_address!r} is not "
                                  "host:port", key="haAdvertisedAddress")
        if self.ha_transfer_batch_size < 1:
            raise ConfigError("haTransferBatchSize must be positive", key="haTransferBatchSize")
        if self.logical_sync_interval < 1:
            raise ConfigError("logicalSyncInterval must be positive", key="logicalSyncInterval")
        if self.max_incomplete_frame_bytes < 1:
            raise ConfigError("maxIncompleteFrameBytes must be positive",
                              key="maxIncompleteFrameBytes")
        if self.batch_max_children < 1 or self.batch_max_bytes < 1:
            raise ConfigError("batchMaxChildren and batchMaxBytes must be positive",
                              key="batchMaxChildren" if self.batch_max_children < 1
                              else "batchMaxBytes")

    @property
    def credentials(self) -> tuple[str, str] | None:
        """The (access key, secret key) this broker signs its own requests with."""
        if self.access_key:
            return self.access_key, self.secret_key
        return inner_credentials(self.inner_client_authentication_credentials)

    @property
    def advertised_host(self) -> str:
        """The host name servers and clients are given (``brokerIP1`` when set)."""
        return advertised_host(self.bind_address, self.broker_ip1)

    @property
    def broker_addr(self) -> str:
        return f"{self.advertised_host}:{self.listen_port}"

    @property
    def ha_port(self) -> int:
        """The HA port to bind (``haListenPort``, by default ``listenPort + 1``)."""
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        return self.listen_port + 1 if self.listen_port else 0

    @property
    def initial_role(self) -> BrokerRole:
        """The role the broker starts in: ``brokerRole``, but in controller mode a
        replica without master until the controllers say (it takes no sends)."""
        return BrokerRole.SLAVE if self.enable_controller_mode else self.broker_role

    @property
    def master_is_sync(self) -> bool:
        """Whether this broker, when master, waits for replicas (SYNC_MASTER)."""
        return self.broker_role is BrokerRole.SYNC_MASTER

    @property
    def controller_addrs(self) -> list[str]:
        return [a.strip() for a in self.controller_addr.replace(",", ";").split(";")
                if a.strip()]

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.replace(",", ";").split(";") if a.strip()]


def load_broker_config(
    path: str | Path | None = None, *, overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[BrokerConfig, StoreConfig, list[str]]:
    """Broker and store config from a file, the keys changed at run time, the environment
    and overrides; plus unknown keys."""
    from_file: dict[str, Any] = {}
    if path is not None:
        from_file.update(read_properties(path))
    environ = os.environ if env is None else env
    later: dict[str, Any] = {**env_values(BrokerConfig, environ),
                             **env_values(StoreConfig, environ), **(overrides or {})}
    broker, store, unknown = _bind({**from_file, **later})
    kept_path = overrides_path(store.store_path_root_dir)
    kept = shown_keys(CONFIG_CLASSES, kept_path, read_overrides(kept_path))
    if not kept:
        return broker, store, unknown
    given_later = {shown_of(CONFIG_CLASSES, k) for k in later}
    shadowed = sorted(k for k in kept if k in given_later)
    if shadowed:
        log.warning("%s: %s changed at run time, but the environment or --set gives %s "
                    "again, and wins", kept_path, ", ".join(shadowed),
                    "it" if len(shadowed) == 1 else "them")
    effective = {k: v for k, v in kept.items() if k not in given_later}
    try:
        return _bind({**from_file, **effective, **later})
    except ConfigError as exc:
        raise ConfigError(f"{kept_path}: {exc}", key=exc.key) from None


#: The config classes a broker's keys belong to (its own and its store's).
CONFIG_CLASSES: tuple[type[Any], ...] = (BrokerConfig, StoreConfig)


def _bind(values: dict[str, Any]) -> tuple[BrokerConfig, StoreConfig, list[str]]:
    broker_keys = set(config_keys(BrokerConfig)) | {
        f.name for f in dataclasses.fields(BrokerConfig)}
    store_keys = set(config_keys(StoreConfig)) | {f.name for f in dataclasses.fields(StoreConfig)}
    broker_vals = {k: v for k, v in values.items() if k in broker_keys}
    store_vals = {k: v for k, v in values.items() if k in store_keys}
    unknown = sorted(k for k in values if k not in broker_keys and k not in store_keys)
    broker, _ = bind(BrokerConfig, broker_vals)
    if "maxMessageSize" in values or "max_message_size" in values:
        store_vals.setdefault("maxMessageSize", broker.max_message_size)
    store, _ = bind(StoreConfig, store_vals)
    return broker, store, unknown

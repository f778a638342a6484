"""NameServerApp: the name server's processors over a :class:`RouteInfoManager`.

::

    app = NameServerApp(NamesrvConfig(listen_port=9876))
    await app.start()
    ...
    await app.stop()

Request codes served: REGISTER_BROKER (103),
UNREGISTER_BROKER (104), GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), DELETE_TOPIC_IN_NAMESRV (216),
QUERY_DATA_VERSION (322), BROKER_HEARTBEAT (904), and the KV config: PUT_KV_CONFIG (100),
GET_KV_CONFIG (101), DELETE_KV_CONFIG (102), GET_KVLIST_BY_NAMESPACE (219)
(:mod:`tidemq.namesrv.kv_config`); any other code is answered 3
REQUEST_CODE_NOT_SUPPORTED by the dispatcher. Every handler is a plain function: the route
table is synchronous, so nothing here waits.

Bad input never takes the server down: a missing or unparsable header field, or a body
that cannot be decoded, is answered 29 INVALID_PARAMETER with a remark naming the field
(or body); the connection stays open and so does everyone else's.

Liveness: every ``scanNotActiveBrokerInterval`` ms the expiry task drops brokers past
their timeout and closes the connections they registered on, unless another live broker
still uses that connection; a connection that closes takes the brokers registered on it
with it. :meth:`NameServerApp.on_brokers_removed` reports each removal (tests await it).

Controller mode: given a :class:`~tidemq.namesrv.controller.ControllerApp`
(``enableControllerInNamesrv=true``), the name server also serves the controller's request
codes on its port, passes each BROKER_HEARTBEAT on to it, and starts and stops it with
itself (docs/replication.md).

Restart: a name server keeps no routes across runs. For ``brokerRejoinWindow`` ms after
start its route answers say ``routeMayBeIncomplete=true``, so that TideMQ clients keep
the brokers they knew until those have had time to register again.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import zlib
from collections.abc import Awaitable, Callable, Mapping

from tidemq.codec.bodies import (
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    decode_body,
    decode_register_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    ROUTE_MAY_BE_INCOMPLETE,
    BrokerHeartbeatRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    KVConfigRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from tidemq.codec.schema import HeaderFieldError
from tidemq.codec.server_roles import refuse_unserved
from tidemq.codec.topic_table import decode_topics
from tidemq.errors import ConnectionLost, RemoteProtocolError, ResponseCode
from tidemq.formats.javaprops import (
    describe,
    properties_text,
)
from tidemq.namesrv import config_overrides, runtime_config
from tidemq.namesrv.auth_mirror import AuthMirror
from tidemq.namesrv.config import NamesrvConfig
from tidemq.namesrv.config_update import planned_and_kept
from tidemq.namesrv.controller import ControllerApp
from tidemq.namesrv.kv_config import ORDER_TOPIC_CONFIG, KVConfig
from tidemq.namesrv.liveness import Clock, monotonic_ms
from tidemq.namesrv.metrics import NamesrvMetrics
from tidemq.namesrv.routes import RemovedBroker, RouteInfoManager
from tidemq.namesrv.topic_diff import TableDiff, diff_topics
from tidemq.net.acl import AclFile, AclGate
from tidemq.net.acl.metrics import AclCollector
from tidemq.net.acl.principal import Directory
from tidemq.net.bind import local_host, warn_if_exposed
from tidemq.net.connection import Connection
from tidemq.net.dispatcher import Processor
from tidemq.net.http import MetricsHttpServer, start_metrics
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.server import RemotingServer
from tidemq.net.tasks import cancel_and_wait

__all__ = ["NameServerApp", "RemovedListener"]

log = logging.getLogger(__name__)
#: Bad requests: a peer can send as many as it likes.
bad_request_log = RateLimitedLog(log)

#: Called with the brokers one event removed (an expiry scan, a closed connection, ...).
RemovedListener = Callable[[list[RemovedBroker]], None]

_Answer = RemotingCommand | Awaitable[RemotingCommand]
_Handler = Callable[["NameServerApp", Connection, RemotingCommand], _Answer]
#: REGISTER_BROKER bodies from this size on are decoded on a thread (a topic at a time:
#: the event loop serves on meanwhile); smaller ones, when none waits, on the loop.
THREAD_DECODE_BYTES = 64 * 1024


def _guarded(handler: _Handler) -> _Handler:
    """Answer bad input from the peer with INVALID_PARAMETER naming what was wrong."""

    @functools.wraps(handler)
    def run(self: NameServerApp, conn: Connection, cmd: RemotingCommand) -> _Answer:
        try:
            return handler(self, conn, cmd)
        except (HeaderFieldError, RemoteProtocolError) as exc:
            return _refused(conn, cmd, exc)

    return run


def _refused(conn: Connection, cmd: RemotingCommand,
             exc: HeaderFieldError | RemoteProtocolError) -> RemotingCommand:
    if isinstance(exc, HeaderFieldError):
        remark = f"{_name(cmd.code)}: bad header field {exc.key!r}: {exc.reason}"
    else:
        remark = f"{_name(cmd.code)}: {exc}"
    bad_request_log.info("bad request from %s: %s", conn.remote_address, remark)
    return cmd.response(ResponseCode.INVALID_PARAMETER, remark)


def _crc_refused(conn: Connection, cmd: RemotingCommand,
                 header: RegisterBrokerRequestHeader) -> RemotingCommand:
    log.warning("REGISTER_BROKER from %s (%s): body crc32 does not match",
                conn.remote_address, header.broker_addr)
    return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")


def _decode_registration(data: bytes, header: RegisterBrokerRequestHeader,
                         version: int) -> RegisterBrokerBody:
    if header.compressed:  # a line a topic, decoded a topic at a time already
        return decode_register_body(data, compressed=True, broker_version=version)
    return decode_topics(data, RegisterBrokerBody)


def _crc_matches(data: bytes | bytearray | memoryview,
                 header: RegisterBrokerRequestHeader) -> bool:
    return header.body_crc32 == 0 or zlib.crc32(data) & 0x7FFFFFFF == header.body_crc32


def _decode_and_diff(data: bytes, header: RegisterBrokerRequestHeader, version: int,
                     base: Mapping[str, TopicConfig] | None
                     ) -> tuple[RegisterBrokerBody, TableDiff] | None:
    """On a thread: the body, and its topics against the table applied before it;
    ``None`` when its CRC32 is not the header's."""
    if not _crc_matches(data, header):
        return None
    body = _decode_registration(data, header, version)
    return body, diff_topics(base, body.topic_config_serialize_wrapper.topic_config_table)


def _name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"request {code}"


class NameServerApp:
    """A name server: remoting server, route table, expiry task. See the module docstring."""

    def __init__(self, config: NamesrvConfig | None = None, *,
                 clock: Clock = monotonic_ms, controller: ControllerApp | None = None,
                 acl_directory: Directory | None = None) -> None:
        """``acl_directory``: check requests against these principals (an embedding
        process's ACL 2.0 users) instead of ``aclEnable``'s file."""
        self.config = config = config or NamesrvConfig()
        #: The embedded controller (``enableControllerInNamesrv``), if any.
        self.controller = controller
        self.routes = RouteInfoManager(
            clock=clock,
            default_timeout_ms=config.broker_channel_expired_time,
            delete_topic_with_broker_registration=config.delete_topic_with_broker_registration,
        )
        self.server = RemotingServer(
            config.bind_address, config.listen_port,
            max_frame_size=config.max_frame_size, idle_seconds=config.idle_seconds,
            receive_budget=config.max_incomplete_frame_bytes, tls=config.tls_server,
        )
        #: The KV config (``kvConfigPath``), read at construction.
        self.kv_config = KVConfig(config.kv_config_path or None)
        self.kv_config.on_change(self._kv_changed)
        self.kv_config.load()
        self._conn_ids: dict[Connection, int] = {}
        self._conns: dict[int, Connection] = {}
        self._ids = itertools.count(1)
        #: Registrations (and unregistrations) applied in the order they came, while one
        #: decoded on a thread is waited for (:meth:`_register_broker`); how many wait.
        self._register_order = asyncio.Lock()
        self._queued = 0
        self._listeners: list[RemovedListener] = []
        self._scanner: asyncio.Task[None] | None = None
        self._started_ms: int | None = None
        self._ready = not config.need_wait_for_service
        self.metrics = NamesrvMetrics(self.routes, self.server)
        self.metrics_server: MetricsHttpServer | None = None
        #: The ACL interceptor (``aclEnable``): around every processor.
        #: The copy of a broker's ACL 2.0 users (``authenticationEnabled``), if any.
        self.auth_mirror: AuthMirror | None = None
        if acl_directory is None and config.authentication_enabled:
            self.auth_mirror = AuthMirror.from_config(config, self.routes.cluster_info)
            acl_directory = self.auth_mirror.directory
        self.acl = (AclGate(acl_directory) if acl_directory is not None
                    else AclGate(AclFile(config.acl_file)) if config.acl_enable else None)
        if self.acl is not None:
            self.metrics.registry.register(AclCollector(self.acl, "tidemq_namesrv"))
        processors: dict[int, Processor] = {}
        if controller is not None:  # coroutines: not counted (the counter is synchronous)
            processors.update(controller.processors())
        processors.update(
            (code, self.metrics.counted(code, p)) for code, p in self._processors().items())
        for code, processor in processors.items():
            handler = processor
            if self.acl is not None:
                handler = self.acl.wrap(code, handler)
            self.server.register(code, handler)
        self.server.register_default(lambda conn, cmd: refuse_unserved(cmd, "name server"))
        self.server.on_connection_closed(self._connection_closed)

    def __repr__(self) -> str:
        return f"<NameServerApp {self.address} {self.routes!r}>"

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        return self.server.port

    @property
    def address(self) -> str:
        """``"host:port"`` to reach this server; a wildcard bind gives the loopback host."""
        host = local_host(self.server.host)
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def on_brokers_removed(self, listener: RemovedListener) -> None:
        """Call ``listener(removed)`` after every event that removed brokers."""
        self._listeners.append(listener)

    async def start(self) -> None:
        """Copy the ACL 2.0 users of ``authMetadataBroker`` (if set), bind, then start the
        expiry task."""
        warn_if_exposed(log, "the name server", self.config.bind_address,
                        acl=self.acl is not None, reach="read every route and delete topics")
        if self.auth_mirror is not None:
            await self.auth_mirror.copy_first()
        try:
            await self.server.start()
            if self.controller is not None:
                try:
                    await self.controller.start(self.address, data_dir=self.config.data_dir)
                except BaseException:  # its Raft log's directory is locked, say: serve nothing
                    await self.server.close()
                    raise
        except BaseException:  # the port is taken, say: close the copy's connection too
            if self.auth_mirror is not None:
                await self.auth_mirror.stop()
            raise
        self._started_ms = self.routes.clock()
        self._scanner = asyncio.ensure_future(self._scan_forever())
        if self.auth_mirror is not None:
            self.auth_mirror.start()
        self.metrics_server = await start_metrics(
            self.config, self.metrics.render, server="the name server", logger=log,
            reach="read its metrics (broker and topic names)")
        log.info("name server listening on %s", self.address)

    async def stop(self) -> None:
        """Stop the expiry task and close the server (idempotent)."""
        scanner, self._scanner = self._scanner, None
        await cancel_and_wait(scanner)
        metrics, self.metrics_server = self.metrics_server, None
        if metrics is not None:
            await metrics.close()
        if self.auth_mirror is not None:
            await self.auth_mirror.stop()
        await self.server.close()
        if self.controller is not None:
            await self.controller.stop()

    async def __aenter__(self) -> NameServerApp:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def scan_not_active_brokers(self, now_ms: int | None = None) -> list[RemovedBroker]:
        """One expiry pass: drop brokers past their timeout, close connections left idle
        by it. The expiry task calls this; tests call it with an injected clock."""
        removed = self.routes.scan_expired(now_ms)
        for broker in removed:
            log.warning("broker %s (%s id %d) expired: not heard from within its timeout",
                        broker.broker_addr, broker.broker_name, broker.broker_id)
        for conn_id in {b.conn_id for b in removed if b.conn_id is not None}:
            conn = self._conns.get(conn_id)
            if conn is not None and not self.routes.brokers_on(conn_id):
                conn.close("broker registration expired")
        self._notify(removed)
        return removed

    # ------------------------------------------------------------------ processors

    def _processors(self) -> dict[int, Callable[[Connection, RemotingCommand], _Answer]]:
        table: dict[int, _Handler] = {
            RequestCode.REGISTER_BROKER: NameServerApp._register_broker,
            RequestCode.UNREGISTER_BROKER: NameServerApp._unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: NameServerApp._get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: NameServerApp._cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: NameServerApp._topic_list,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: NameServerApp._delete_topic,
            RequestCode.QUERY_DATA_VERSION: NameServerApp._query_data_version,
            RequestCode.BROKER_HEARTBEAT: NameServerApp._broker_heartbeat,
            RequestCode.PUT_KV_CONFIG: NameServerApp._put_kv_config,
            RequestCode.GET_KV_CONFIG: NameServerApp._get_kv_config,
            RequestCode.DELETE_KV_CONFIG: NameServerApp._delete_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: NameServerApp._get_kv_list,
            RequestCode.GET_NAMESRV_CONFIG: NameServerApp._get_config,
            RequestCode.UPDATE_NAMESRV_CONFIG: NameServerApp._update_config,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: NameServerApp._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: NameServerApp._add_write_perm,
        }
        return {int(code): functools.partial(handler, self) for code, handler in table.items()}

    @_guarded
    def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> _Answer:
        """A large body is decoded on a thread, the loop serving on meanwhile (twenty
        thousand topics take a tenth of a second); registrations are applied in the
        order they came all the same."""
        header = RegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        if not self._queued and len(cmd.body) < THREAD_DECODE_BYTES:
            if not _crc_matches(cmd.body, header):
                return _crc_refused(conn, cmd, header)
            body = RegisterBrokerBody()  # no body: no topics, DataVersion zero (as upstream)
            if cmd.body:
                body = _decode_registration(bytes(cmd.body), header, cmd.version)
            return self._registered(conn, cmd, header, body)
        return self._in_order(lambda: self._decoded_registration(conn, cmd, header))

    def _in_order(self, step: Callable[[], Awaitable[RemotingCommand]]
                  ) -> asyncio.Future[RemotingCommand]:
        """``step`` run after the registrations and unregistrations queued before it
        (counted from now: a request that comes next waits behind this one)."""
        self._queued += 1

        async def run() -> RemotingCommand:
            try:
                async with self._register_order:
                    return await step()
            finally:
                self._queued -= 1
        return asyncio.ensure_future(run())

    async def _decoded_registration(self, conn: Connection, cmd: RemotingCommand,
                                    header: RegisterBrokerRequestHeader) -> RemotingCommand:
        """A registration decoded on a thread, its CRC32 summed there too; the answer."""
        body = RegisterBrokerBody()
        diff = None
        if not cmd.body:
            if not _crc_matches(cmd.body, header):
                return _crc_refused(conn, cmd, header)
        else:
            base = self.routes.applied_topics(header.broker_name)
            try:
                decoded = await asyncio.to_thread(
                    _decode_and_diff, bytes(cmd.body), header, cmd.version, base)
            except RemoteProtocolError as exc:
                return _refused(conn, cmd, exc)
            if decoded is None:
                return _crc_refused(conn, cmd, header)
            body, diff = decoded
        if not conn.is_open:  # the broker registers again over its next connection
            return cmd.response(ResponseCode.SYSTEM_ERROR, "connection closed")
        return self._registered(conn, cmd, header, body, diff)

    def _registered(self, conn: Connection, cmd: RemotingCommand,
                    header: RegisterBrokerRequestHeader, body: RegisterBrokerBody,
                    diff: TableDiff | None = None) -> RemotingCommand:
        """Apply a decoded registration (``diff``: its topics compared on a thread);
        the answer."""
        result = self.routes.register_broker(header, body, conn_id=self._conn_id(conn),
                                             diff=diff)
        if result.ignored_for is not None:
            log.warning("broker %s id %d of %s registered from %s in state %d, but %s holds "
                        "that id in a later state (a master elected after it): the "
                        "registration is ignored", header.broker_name, header.broker_id,
                        header.cluster_name, header.broker_addr,
                        body.topic_config_serialize_wrapper.data_version.state_version,
                        result.ignored_for)
        if result.took_place_of is not None:
            log.warning("broker %s id %d of %s registered from %s, in the place of %s, "
                        "which is still registered: two brokers claim one name and id (a "
                        "broker started without a brokerName or brokerId of its own?), and "
                        "routes now lead to %s", header.broker_name, header.broker_id,
                        header.cluster_name, header.broker_addr, result.took_place_of,
                        header.broker_addr)
        if result.transition.joined:
            log.info("broker registered: %s %s id %d (%s)", header.cluster_name,
                     header.broker_name, header.broker_id, header.broker_addr)
            if self.auth_mirror is not None and self.auth_mirror.wants_copy():
                self.auth_mirror.wake()  # the first broker to copy the users from
        self._notify(list(result.displaced))
        ext = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        ).to_ext()
        confs = self.routes.order_topic_confs()
        reply = b""
        if self.config.return_order_topic_config_to_broker and confs:
            reply = encode_body(KVTable(table=confs))
        return cmd.response(ext_fields=ext, body=reply)

    @_guarded
    def _unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> _Answer:
        header = UnRegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        if self._queued:  # after the registrations that came before it
            async def unregister() -> RemotingCommand:
                return self._unregistered(cmd, header)
            return self._in_order(unregister)
        return self._unregistered(cmd, header)

    def _unregistered(self, cmd: RemotingCommand,
                      header: UnRegisterBrokerRequestHeader) -> RemotingCommand:
        removed = self.routes.unregister_broker(header.broker_addr)
        if removed is not None:
            log.info("broker unregistered: %s %s id %d (%s)", removed.cluster_name,
                     removed.broker_name, removed.broker_id, removed.broker_addr)
            self._notify([removed])
        return cmd.response()

    @_guarded
    def _get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext(cmd.ext_fields)
        if not self._is_ready():
            return cmd.response(ResponseCode.SYSTEM_ERROR, "name server not ready")
        route = self.routes.pick_route(header.topic)
        ext = {ROUTE_MAY_BE_INCOMPLETE: "true"} if self._rejoining() else None
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}", ext,
            )
        if self.config.order_message_enable:
            route.order_topic_conf = self.routes.order_topic_conf(header.topic)
        # Standard JSON for every client version: quoted numeric keys.
        return cmd.response(body=encode_body(route), ext_fields=ext)

    @_guarded
    def _cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=encode_body(self.routes.cluster_info()))

    @_guarded
    def _topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not self.config.enable_all_topic_list:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "disable")
        return cmd.response(body=encode_body(self.routes.topic_list()))

    @_guarded
    def _delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext(cmd.ext_fields)
        if self.routes.delete_topic(header.topic, header.cluster_name or None):
            log.info("topic %s deleted from the routes (cluster %s)", header.topic,
                     header.cluster_name or "*")
        return cmd.response()

    @_guarded
    def _query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_ext(cmd.ext_fields)
        if not cmd.body:
            raise RemoteProtocolError("the body must be the broker's DataVersion")
        version = decode_body(cmd.body, DataVersion)
        changed = self.routes.is_data_version_changed(header.broker_addr, version)
        self.routes.heartbeat(header.broker_addr)
        stored = self.routes.data_version(header.broker_addr)
        ext = QueryDataVersionResponseHeader(changed=changed).to_ext()
        return cmd.response(ext_fields=ext, body=encode_body(stored) if stored else b"")

    @_guarded
    def _broker_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields)
        self.routes.heartbeat(header.broker_addr)
        if self.controller is None:
            return cmd.response()
        return cmd.response(ext_fields=self.controller.heartbeat(header).to_ext())

    @_guarded
    def _put_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_ext(cmd.ext_fields)
        if not h.namespace or not h.key:
            raise RemoteProtocolError("namespace and key must not be empty")
        self.kv_config.put(h.namespace, h.key, h.value)
        log.info("KV config put: %s %s=%s (from %s)", h.namespace, h.key, h.value,
                 conn.remote_address)
        return cmd.response()

    @_guarded
    def _get_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = KVConfigRequestHeader.from_ext(cmd.ext_fields)
        value = self.kv_config.get(h.namespace, h.key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return cmd.response(ext_fields=GetKVConfigResponseHeader(value=value).to_ext())

    @_guarded
    def _delete_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = KVConfigRequestHeader.from_ext(cmd.ext_fields)
        if self.kv_config.delete(h.namespace, h.key):
            log.info("KV config deleted: %s %s (from %s)", h.namespace, h.key,
                     conn.remote_address)
        return cmd.response()

    @_guarded
    def _get_kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVListByNamespaceRequestHeader.from_ext(cmd.ext_fields)
        pairs = self.kv_config.namespace(h.namespace)
        if pairs is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {h.namespace}")
        return cmd.response(body=encode_body(KVTable(table=pairs)))

    # ------------------------------------------------------------------ internals

    def _get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        props = dict(sorted(describe(NamesrvConfig, self.config).items()))
        return cmd.response(body=properties_text(props).encode("utf-8"))

    @_guarded
    def _update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        kept_path = config_overrides.overrides_path(self.config.kv_config_path)
        planned = planned_and_kept(
            cmd, functools.partial(runtime_config.plan_update, self.config), kept_path,
            functools.partial(config_overrides.write_overrides, classes=(NamesrvConfig,)),
            "name server")
        if isinstance(planned, RemotingCommand):
            return planned
        new, changes = planned
        self.config = new
        self.routes.delete_topic_with_broker_registration = (
            new.delete_topic_with_broker_registration)
        log.info("name server config updated by %s: %s (%s)", conn.remote_address,
                 ", ".join(sorted(changes)),
                 f"kept in {kept_path}" if kept_path is not None
                 else "until restart: no kvConfigPath to keep it beside")
        return cmd.response()

    def _write_perm(self, cmd: RemotingCommand, *, writable: bool) -> RemotingCommand:
        name = cmd.ext_fields.get("brokerName", "")
        if not name:
            return cmd.response(ResponseCode.INVALID_PARAMETER, "brokerName is required")
        count = self.routes.change_write_perm(name, writable=writable)
        log.info("%s write permission of broker %s: %d topics",
                 "added" if writable else "wiped", name, count)
        key = "addTopicCount" if writable else "wipeTopicCount"
        return cmd.response(ext_fields={key: str(count)})

    def _wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._write_perm(cmd, writable=False)

    def _add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._write_perm(cmd, writable=True)

    def _kv_changed(self, namespace: str, key: str, value: str | None) -> None:
        if namespace == ORDER_TOPIC_CONFIG:
            self.routes.set_order_topic_conf(key, value)

    def _rejoining(self) -> bool:
        """Whether brokers known to a previous run may still be on their way back
        (``brokerRejoinWindow`` after start)."""
        started = self._started_ms
        return started is not None and (
            self.routes.clock() - started < self.config.broker_rejoin_window)

    def _is_ready(self) -> bool:
        if not self._ready and self._started_ms is not None:
            waited = self.routes.clock() - self._started_ms
            self._ready = waited >= self.config.wait_seconds_for_service * 1000
        return self._ready

    def _conn_id(self, conn: Connection) -> int:
        conn_id = self._conn_ids.get(conn)
        if conn_id is None:
            conn_id = self._conn_ids[conn] = next(self._ids)
            self._conns[conn_id] = conn
        return conn_id

    def _connection_closed(self, conn: Connection, error: ConnectionLost) -> None:
        conn_id = self._conn_ids.pop(conn, None)
        if conn_id is None:
            return
        del self._conns[conn_id]
        removed = self.routes.connection_closed(conn_id)
        for broker in removed:
            log.info("broker %s (%s) removed: its connection closed (%s)",
                     broker.broker_addr, broker.broker_name, error.reason)
        self._notify(removed)

    def _notify(self, removed: list[RemovedBroker]) -> None:
        if not removed:
            return
        for listener in self._listeners:
            try:
                listener(removed)
            except Exception:
                log.exception("brokers-removed listener %r failed", listener)

    async def _scan_forever(self) -> None:
        interval = self.config.scan_not_active_broker_interval / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.scan_not_active_brokers()
            except Exception:  # a bug here must not stop liveness checking for good
                log.exception("expiry scan failed")

"""ControllerApp: the controller-mode request processors over a Raft-replicated state.

::

    app = ControllerApp(ControllerConfig(controller_raft_peers="n0-127.0.0.1:9880;...",
                                         controller_raft_self_id="n0"))
    await app.start()          # standalone: its own remoting server on listenPort
    ...
    await app.stop()

Inside a name server, :meth:`ControllerApp.processors` are registered on the name
server's own port and :meth:`ControllerApp.start` is given that address (and the
directory of the name server's files, beside which the Raft log is kept by default).

The Raft log is kept on disk (:mod:`~tidemq.namesrv.controller.store_dir` says where) and
locked while the controller runs, unless ``controllerStorePath=memory``.

A standalone controller checks every request on its port against the ACL 1.0 accounts
of ``aclFile`` (``aclEnable``), or with ``authenticationEnabled`` against a copy of the
brokers' ACL 2.0 users (:mod:`~tidemq.namesrv.auth_mirror`), taken from the master of the
first group it knows (or ``authMetadataBroker``) once a heartbeat names that master.

Requests that change the state (register, elect, alter the sync-state set, clean) are
answered by the Raft leader only, one at a time: it decides against the state it has
(:mod:`~tidemq.namesrv.controller.decide`), appends the events and answers once they are
applied. Another controller answers 2007 CONTROLLER_NOT_LEADER with the leader's address
in the remark; so do reads, which would otherwise show a follower's possibly older view.
CONTROLLER_GET_METADATA_INFO is answered by every controller. BROKER_HEARTBEAT is
recorded by every controller, and answered with the Raft leader it knows (and, by the
leader, the group's master): a master's lease is renewed from those answers.

The leader looks every ``controllerScanInterval`` ms for masters whose lease lapsed and
elects a new master from the sync-state set. A group it meets for the first time as
leader -- having just taken over, or replaying its log after a restart -- starts with
fresh leases for all its brokers: heartbeats are not replicated, and no broker is taken
for dead for having talked to another controller. A leader that cannot hear from a quorum
elects nobody: its events could not be committed anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidemq.codec.bodies import decode_body
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import (
    AlterSyncStateSetRequestHeader,
    BrokerHeartbeatResponseHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetMetaDataResponseHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    SyncStateSet,
    decode_broker_names,
)
from tidemq.codec.headers import BrokerHeartbeatRequestHeader
from tidemq.codec.schema import HeaderFieldError
from tidemq.codec.server_roles import refuse_unserved
from tidemq.errors import ConfigError, RemoteProtocolError, ResponseCode
from tidemq.formats.javaprops import (
    describe,
    properties_text,
)
from tidemq.namesrv.auth_mirror import AuthMirror
from tidemq.namesrv.config_update import planned_and_kept
from tidemq.namesrv.controller import config_overrides, decide, runtime_config
from tidemq.namesrv.controller.config import ControllerConfig
from tidemq.namesrv.controller.decide import CONTROLLER_TRIGGER, Decision
from tidemq.namesrv.controller.events import AnnounceController
from tidemq.namesrv.controller.heartbeats import Heartbeats
from tidemq.namesrv.controller.raft_terms import NotCommitted, RaftTiming
from tidemq.namesrv.controller.state import BrokerAddresses, ControllerState
from tidemq.namesrv.controller.store_dir import StoreLock, store_dir
from tidemq.namesrv.liveness import Clock, monotonic_ms
from tidemq.net.acl import AclFile, AclGate
from tidemq.net.bind import local_host, warn_if_exposed
from tidemq.net.connection import Connection
from tidemq.net.dispatcher import Processor
from tidemq.net.rate_limited_log import RateLimitedLog
from tidemq.net.server import RemotingServer
from tidemq.net.tasks import cancel_and_wait

if TYPE_CHECKING:
    from tidemq.namesrv.controller.raft import RaftLog

__all__ = ["ControllerApp"]

log = logging.getLogger(__name__)
bad_request_log = RateLimitedLog(log)

_Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]


def _guarded(handler: _Handler) -> _Handler:
    """Answer bad input with INVALID_PARAMETER naming what was wrong."""

    @functools.wraps(handler)
    async def run(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return await handler(conn, cmd)
        except HeaderFieldError as exc:
            remark = f"{RequestCode(cmd.code).name}: bad header field {exc.key!r}: {exc.reason}"
        except RemoteProtocolError as exc:
            remark = f"{RequestCode(cmd.code).name}: {exc}"
        bad_request_log.info("bad request from %s: %s", conn.remote_address, remark)
        return cmd.response(ResponseCode.INVALID_PARAMETER, remark)

    return run


class ControllerApp:
    def __init__(self, config: ControllerConfig, *, clock: Clock = monotonic_ms,
                 timing: RaftTiming | None = None) -> None:
        if not config.controller_raft_peers:
            raise ValueError("a controller needs controllerRaftPeers and controllerRaftSelfId")
        self.config = config
        self.clock = clock
        self.timing = timing or RaftTiming()
        self.heartbeats = Heartbeats(config.controller_broker_heartbeat_timeout)
        self.server: RemotingServer | None = None
        self.raft: RaftLog | None = None
        self.address = ""
        #: The Raft log's directory once started (``None``: memory only).
        self.store_path: Path | None = None
        self._store_lock: StoreLock | None = None
        self._decide_lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._leading = False
        #: Groups whose leases this leader has started (see :meth:`watch_once`).
        self._judged: set[str] = set()
        self._announced = False
        #: Elections this controller carried out (tests and logs read it).
        self.elections = 0
        standalone = not config.enable_controller_in_namesrv
        #: A standalone controller's copy of the brokers' ACL 2.0 users
        #: (``authenticationEnabled``), if any.
        self.auth_mirror = (AuthMirror.from_config(config, self.broker_addresses)
                            if config.authentication_enabled and standalone else None)
        #: Masters the copy was asked for after a heartbeat named them (at most once each).
        self._copy_asked: set[str] = set()
        #: The ACL of a standalone controller's port (``aclEnable``, or the copy of the
        #: ACL 2.0 users); inside a name server, the name server's applies.
        self.acl = (AclGate(self.auth_mirror.directory) if self.auth_mirror is not None
                    else AclGate(AclFile(config.acl_file))
                    if config.acl_enable and standalone else None)

    def __repr__(self) -> str:
        return f"<ControllerApp {self.config.controller_raft_self_id} {self.address}>"

    # ------------------------------------------------------------------ life cycle

    def processors(self) -> dict[int, Processor]:
        table: dict[int, _Handler] = {
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register_broker,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect_master,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter_sync_state_set,
            RequestCode.CLEAN_BROKER_DATA: self._clean_broker_data,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._sync_state_data,
            RequestCode.CONTROLLER_GET_METADATA_INFO: self._metadata,
            RequestCode.BROKER_HEARTBEAT: self._heartbeat,
            RequestCode.GET_CONTROLLER_CONFIG: self._get_config,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self._update_config,
        }
        return {int(code): _guarded(handler) for code, handler in table.items()}

    async def start(self, address: str | None = None, *,
                    data_dir: Path | None = None) -> None:
        """Lock the Raft log's directory, start the Raft node and the lease watcher;
        without ``address`` (standalone) also serve the processors on ``listenPort``.
        ``data_dir``: the embedding name server's files, beside which the Raft log is kept
        when ``controllerStorePath`` is empty. A directory that cannot be created, written
        or locked is a :class:`~tidemq.errors.ConfigError`, raised before anything is
        bound."""
        config = self.config
        store = store_dir(config.controller_store_path, config.controller_raft_self_id,
                          beside=data_dir)
        if config.raft_exposed:
            exposure = (f"the controller's Raft port {config.raft_address} is reachable from "
                        "other machines and its traffic is neither encrypted nor "
                        "authenticated: anyone who reaches it can run code in this process "
                        "(PySyncObj unpickles what it receives), read the replicated state "
                        "and take part in its elections")
            if not config.controller_raft_allow_unauthenticated:
                raise ConfigError(
                    f"{exposure}; set controllerRaftPassword (the same on every "
                    "controller), or give the Raft ports loopback addresses, or -- on a "
                    "network only the controllers reach -- set "
                    "controllerRaftAllowUnauthenticated=true", key="controllerRaftPassword")
            log.warning("%s (controllerRaftAllowUnauthenticated=true); keep the Raft ports "
                        "on a network only the controllers reach", exposure)
        if store is None:
            log.warning("controllerStorePath=memory: the controller %s keeps its Raft log "
                        "in memory only; if it restarts while another controller is down, "
                        "changes the two had committed can be lost", config.controller_raft_self_id)
        else:
            self._store_lock = StoreLock.acquire(store)
        self.store_path = store
        try:
            await self._start(address)
        except BaseException:
            await self.stop()
            raise

    async def _start(self, address: str | None) -> None:
        config = self.config
        if address is None:
            warn_if_exposed(log, "the controller", config.bind_address,
                            acl=self.acl is not None,
                            reach="elect masters and change the brokers' sync-state sets")
            if self.auth_mirror is not None:
                await self.auth_mirror.copy_first()
            server = RemotingServer(config.bind_address, config.listen_port,
                                    max_frame_size=config.max_frame_size,
                                    tls=config.tls_server)
            acl = self.acl
            for code, processor in self.processors().items():
                server.register(code, processor if acl is None else acl.wrap(code, processor))
            server.register_default(lambda conn, cmd: refuse_unserved(cmd, "controller"))
            self.server = server
            await server.start()
            host = local_host(server.host)
            address = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
        self.address = address
        from tidemq.namesrv.controller.raft import RaftLog  # PySyncObj: when one runs only

        self.raft = RaftLog(config.raft_address, config.raft_partners,
                            journal_dir=self.store_path, timing=self.timing,
                            password=config.controller_raft_password)
        self._watcher = asyncio.ensure_future(self._watch_forever())
        if self.auth_mirror is not None:
            self.auth_mirror.start()
        log.info("controller %s serving on %s, Raft on %s, its log %s",
                 config.controller_raft_self_id, address, config.raft_address,
                 f"in {self.store_path}" if self.store_path is not None else "in memory")

    async def stop(self) -> None:
        watcher, self._watcher = self._watcher, None
        await cancel_and_wait(watcher)
        if self.auth_mirror is not None:
            await self.auth_mirror.stop()
        server, self.server = self.server, None
        if server is not None:
            await server.close()
        raft, self.raft = self.raft, None
        if raft is not None:
            await asyncio.to_thread(raft.close)
        lock, self._store_lock = self._store_lock, None
        if lock is not None:  # after the node stopped writing its files
            lock.release()

    async def __aenter__(self) -> ControllerApp:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def is_leader(self) -> bool:
        return self.raft is not None and self.raft.is_leader

    def broker_addresses(self) -> BrokerAddresses:
        """Where the brokers of every group the controllers know are."""
        raft = self.raft
        if raft is None:
            return BrokerAddresses()
        with raft.reading() as state:
            return state.addresses()

    def leader_address(self) -> str | None:
        """The request address of the leading controller, if it has announced itself."""
        raft = self.raft
        if raft is None:
            return None
        leader = raft.leader
        if leader is None:
            return None
        with raft.reading() as state:
            return state.controllers.get(leader)

    # ------------------------------------------------------------------ the lease watcher

    async def _watch_forever(self) -> None:
        while True:  # the interval read each time: it changes at run time
            await asyncio.sleep(self.config.controller_scan_interval / 1000)
            try:
                await self.watch_once()
            except Exception:  # a bug here must not stop failover for good
                log.exception("controller lease scan failed")

    async def watch_once(self) -> None:
        """Announce this controller's address once, and on the leader elect a new master
        for every group whose master's lease lapsed."""
        raft = self.raft
        if raft is None:
            return
        if not self._announced and raft.leader is not None:
            with contextlib.suppress(NotCommitted):
                await raft.submit(AnnounceController(raft_address=raft.self_address,
                                                     address=self.address))
                self._announced = True
        if not raft.is_leader:
            self._leading = False
            self._judged.clear()
            return
        now = self.clock()
        with raft.reading() as state:
            if not self._leading:
                self._leading = True
                log.info("controller %s leads (term %d)", self.config.controller_raft_self_id,
                         raft.term)
            # A group this leader has not judged yet (it just took over, or the group
            # just appeared as the log was replayed) starts with fresh leases.
            fresh = [g for name, g in state.groups.items() if name not in self._judged]
            self.heartbeats.grant_all(
                (((g.broker_name, i), addr) for g in fresh for i, addr in g.brokers.items()),
                now)
            self._judged.update(g.broker_name for g in fresh)
            lapsed = [g.broker_name for g in state.groups.values()
                      if not g.never_elected and (
                          g.master_id is None
                          or not self.heartbeats.alive((g.broker_name, g.master_id), now))]
        for name in lapsed:
            header = ElectMasterRequestHeader(broker_name=name, broker_id=CONTROLLER_TRIGGER)
            async with self._decide_lock:
                with raft.reading() as state:
                    decision = decide.elect_master(
                        state, self.heartbeats, header, self.clock(),
                        unclean=self.config.enable_elect_unclean_master)
                if not await self._commit(decision) or not decision.events:
                    continue
                if decision.code == ResponseCode.SUCCESS:
                    self.elections += 1
                    log.warning("broker group %s: master lease lapsed, elected %s",
                                name, decision.header)
                else:
                    log.error("broker group %s: %s", name, decision.remark)

    # ------------------------------------------------------------------ processors

    def _not_leader(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if self.is_leader:
            return None
        if self.raft is not None and self.raft.catching_up:
            where = ("it was just elected and is still applying the changes committed "
                     "before; ask again shortly")
        else:
            leader = self.leader_address()
            where = f"the leader is at {leader}" if leader else "no leader is known"
        return cmd.response(ResponseCode.CONTROLLER_NOT_LEADER,
                            f"controller {self.config.controller_raft_self_id} is not the "
                            f"leader; {where}")

    async def _commit(self, decision: Decision) -> bool:
        """Replicate the decision's events; ``False`` (and the decision answers a
        failure) when one could not be committed or no longer applied."""
        assert self.raft is not None
        for event in decision.events:
            try:
                applied = await self.raft.submit(event)
            except NotCommitted as exc:
                decision.code, decision.remark = ResponseCode.CONTROLLER_NOT_LEADER, str(exc)
                decision.header, decision.body = None, b""
                return False
            if not applied:
                decision.code = ResponseCode.CONTROLLER_INVALID_REQUEST
                decision.remark = "the state changed while the request was decided; ask again"
                decision.header, decision.body = None, b""
                return False
        return True

    async def _decide(self, cmd: RemotingCommand,
                      make: Callable[[], Decision]) -> RemotingCommand:
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        async with self._decide_lock:
            decision = make()
            await self._commit(decision)
        ext = decision.header.to_ext() if decision.header is not None else None
        return cmd.response(decision.code, decision.remark, ext, decision.body)

    def _reading(self, make: Callable[[ControllerState], Decision]) -> Decision:
        assert self.raft is not None
        with self.raft.reading() as state:
            return make(state)

    async def _register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = RegisterBrokerToControllerRequestHeader.from_ext(cmd.ext_fields)
        return await self._decide(cmd, lambda: self._reading(
            lambda s: decide.register_broker(s, self.heartbeats, header, self.clock())))

    async def _elect_master(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = ElectMasterRequestHeader.from_ext(cmd.ext_fields)
        unclean = self.config.enable_elect_unclean_master
        response = await self._decide(cmd, lambda: self._reading(
            lambda s: decide.elect_master(s, self.heartbeats, header, self.clock(),
                                          unclean=unclean)))
        if response.code == ResponseCode.SUCCESS:
            self.elections += 1
            log.warning("broker group %s: elected master %s on request from %s",
                        header.broker_name, response.ext_fields.get("masterBrokerId"),
                        conn.remote_address)
        return response

    async def _alter_sync_state_set(self, conn: Connection,
                                    cmd: RemotingCommand) -> RemotingCommand:
        header = AlterSyncStateSetRequestHeader.from_ext(cmd.ext_fields)
        if not cmd.body:
            raise RemoteProtocolError("the body must be the new SyncStateSet")
        body = decode_body(cmd.body, SyncStateSet)
        return await self._decide(cmd, lambda: self._reading(
            lambda s: decide.alter_sync_state_set(s, self.heartbeats, header, body,
                                                  self.clock())))

    async def _clean_broker_data(self, conn: Connection,
                                 cmd: RemotingCommand) -> RemotingCommand:
        header = CleanControllerBrokerDataRequestHeader.from_ext(cmd.ext_fields)
        return await self._decide(cmd, lambda: self._reading(
            lambda s: decide.clean_broker_data(s, self.heartbeats, header, self.clock())))

    async def _replica_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetReplicaInfoRequestHeader.from_ext(cmd.ext_fields)
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        decision = self._reading(lambda s: decide.replica_info(s, header.broker_name))
        ext = decision.header.to_ext() if decision.header is not None else None
        return cmd.response(decision.code, decision.remark, ext, decision.body)

    async def _sync_state_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        names = decode_broker_names(cmd.body) if cmd.body else []
        refused = self._not_leader(cmd)
        if refused is not None:
            return refused
        decision = self._reading(
            lambda s: decide.sync_state_data(s, self.heartbeats, names, self.clock()))
        return cmd.response(decision.code, decision.remark, None, decision.body)

    async def _metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetMetaDataResponseHeader(
            group=self.config.controller_raft_self_id and "tidemq-controllers",
            controller_leader_id=self._leader_id(),
            controller_leader_address=self.leader_address(),
            is_leader=self.is_leader, peers=self.config.controller_raft_peers)
        return cmd.response(ext_fields=header.to_ext())

    async def _get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        props = dict(sorted(describe(ControllerConfig, self.config).items()))
        return cmd.response(body=properties_text(props).encode("utf-8"))

    async def _update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Change the keys of :data:`~tidemq.namesrv.controller.runtime_config.RUNTIME_KEYS`,
        kept in the store directory across restarts
        (:mod:`~tidemq.namesrv.controller.config_overrides`; a controller that keeps its
        Raft log in memory keeps them until it restarts); another key is refused, naming
        it. A change that cannot be kept is not made."""
        kept_path = config_overrides.overrides_path(self.store_path)
        planned = planned_and_kept(
            cmd, functools.partial(runtime_config.plan_update, self.config), kept_path,
            functools.partial(config_overrides.write_overrides, classes=(ControllerConfig,)),
            "controller")
        if isinstance(planned, RemotingCommand):
            return planned
        new, changes = planned
        self.config = new
        self.heartbeats.default_timeout_ms = new.controller_broker_heartbeat_timeout
        log.info("controller config updated by %s: %s (%s)", conn.remote_address,
                 ", ".join(sorted(changes)),
                 f"kept in {kept_path}" if kept_path is not None
                 else "until restart: controllerStorePath=memory keeps no files")
        return cmd.response()

    def _leader_id(self) -> str | None:
        """The id (in ``controllerRaftPeers``) of the Raft leader this controller knows."""
        leader = self.raft.leader if self.raft is not None else None
        return next((p for p, a in self.config.peers.items() if a == leader), None)

    async def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        answer = self.heartbeat(BrokerHeartbeatRequestHeader.from_ext(cmd.ext_fields))
        return cmd.response(ext_fields=answer.to_ext())

    def heartbeat(self, header: BrokerHeartbeatRequestHeader) -> BrokerHeartbeatResponseHeader:
        """Record a broker's BROKER_HEARTBEAT (the name server passes its own on) and
        answer this controller's view: the leader it knows and, on the leader, the
        group's master, from which a master renews its lease. Only members of a
        registered group are recorded: what peers send cannot grow the table beyond the
        groups the controllers keep."""
        raft = self.raft
        if raft is None:
            return BrokerHeartbeatResponseHeader()
        leading = self.is_leader
        answer = BrokerHeartbeatResponseHeader(controller_leader_id=self._leader_id(),
                                               is_leader=leading)
        if header.broker_id is None:
            return answer  # a broker outside controller mode heartbeating its name server
        with raft.reading() as state:
            group = state.groups.get(header.broker_name)
            if group is None or header.broker_id not in group.brokers:
                return answer
            if leading:
                answer = dataclasses.replace(answer, master_broker_id=group.master_id,
                                             master_epoch=group.master_epoch)
            master = group.master_address
        mirror = self.auth_mirror
        if (mirror is not None and master is not None and master not in self._copy_asked
                and mirror.wants_copy()):
            self._copy_asked.add(master)
            mirror.wake()  # a master to copy the users from
        self.heartbeats.beat(
            (header.broker_name, header.broker_id), header.broker_addr, self.clock(),
            timeout_ms=header.heartbeat_timeout_millis, epoch=header.epoch,
            max_offset=header.max_offset, election_priority=header.election_priority)
        return answer

"""The broker's replication: the role it plays and the parts that follow the role.

:class:`ReplicationService` owns the broker's :class:`~tidemq.broker.replication.role.RoleHolder`
and applies each role it is given:

* a master (ASYNC_MASTER or SYNC_MASTER) takes puts, serves replicas on its HA port
  (:class:`~tidemq.broker.replication.master.HaServer`) and, as a SYNC_MASTER, makes
  sends wait for their copies (:attr:`ReplicationService.acks`);
* a replica (SLAVE) refuses puts (the store answers ``StoreReadOnly("SLAVE")``, sends
  get SERVICE_NOT_AVAILABLE), closes its HA port and copies its master's log
  (:class:`~tidemq.broker.replication.replica.HaClient`); a master whose lease lapsed
  keeps its HA port open while it waits for the controllers
  (:attr:`~tidemq.broker.replication.role.RoleState.lapsed`), and closes it when it is
  made master of another epoch or a replica of another broker.

The send path reads :attr:`ReplicationService.acks` on every send that waits, so a
role change takes effect on the next send; sends still waiting when a SYNC_MASTER
stops being one are answered FLUSH_SLAVE_TIMEOUT. In controller mode the send path also
reads :attr:`ReplicationService.standing`: a master whose lease lapsed acknowledges nothing,
or, under ``masterWithoutControllerQuorum=SYNC_STATE_SET_FOLLOWS``, only what its
sync-state set confirmed (:mod:`~tidemq.broker.replication.standing`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from tidemq.broker.config import BrokerConfig
from tidemq.broker.replication.acks import AckPolicy, ReplicaAcks
from tidemq.broker.replication.lease import MasterLease, lease_ms
from tidemq.broker.replication.master import HaServer
from tidemq.broker.replication.replica import HaClient, ReplicaIdentity
from tidemq.broker.replication.replica_auth import ReplicaAuth
from tidemq.broker.replication.role import BrokerRole, RoleHolder, RoleState
from tidemq.broker.replication.standing import Standing
from tidemq.codec.ha import FRAME_HEADER_SIZE
from tidemq.codec.signature import SigningKey
from tidemq.errors import ConfigError
from tidemq.net.bind import warn_if_exposed
from tidemq.store.message_store import MessageStore

__all__ = ["ReplicationService"]

log = logging.getLogger(__name__)

#: The largest HA frame body a replica accepts, whatever its own haTransferBatchSize.
MAX_FRAME = 64 * 1024 * 1024


def _unwired(_item: Any, _code: int) -> None:
    raise RuntimeError("no send processor answers replicated sends")


class ReplicationService:
    def __init__(self, config: BrokerConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store
        self.role = RoleHolder(RoleState(config.initial_role, config.broker_id,
                                         config.ha_master_address))
        self.server: HaServer | None = None
        #: The epoch :attr:`server` serves as master.
        self._server_epoch = -1
        self.client: HaClient | None = None
        #: Set while a SYNC_MASTER: where sends wait for their copies.
        self.acks: ReplicaAcks | None = None
        #: ``complete(item, code)`` answers a send that waited (the send processor's).
        self.complete: Callable[[Any, int], None] = _unwired
        self.policy = AckPolicy(config.in_sync_replicas, config.min_in_sync_replicas,
                                auto=config.enable_auto_in_sync_replicas,
                                all_in_sync=config.all_ack_in_sync_state_set)
        #: Controller mode: how long this broker may still acknowledge sends as master
        #: (renewed by its controller link; ``None`` under a static configuration).
        self.lease: MasterLease | None = None
        #: Controller mode: what lets this master acknowledge (its lease, or its
        #: sync-state set's confirmations when configured).
        self.standing: Standing | None = None
        if config.enable_controller_mode:
            self.lease = MasterLease(lease_ms(config.controller_heart_beat_timeout_mills,
                                              config.broker_heartbeat_interval))
            self.standing = Standing(self.lease, config.master_without_controller_quorum)
            self.standing.on_confirmed.append(self._on_report)
        #: Who may copy this broker's log while it is master: the broker sets the ACL's
        #: principals before it starts (no ACL: anyone).
        self.auth = ReplicaAuth(None, own=config.credentials,
                                allow_unauthenticated=config.ha_allow_unauthenticated,
                                group=config.broker_name)
        own = config.credentials
        #: What this broker signs its HA connections with while a replica.
        self.identity = (ReplicaIdentity(own[0], SigningKey(own[1]), config.broker_name,
                                         config.broker_id)
                         if own is not None and config.ha_auth_frame_enable else None)
        self._ha_port = config.ha_port
        self._started = False
        self.role.add_listener(self._apply)

    @property
    def ha_address(self) -> str:
        """Where replicas connect: ``haAdvertisedAddress``, else the advertised host and
        the HA port; ``""`` while the port is still to be chosen at bind time
        (``haListenPort=0`` before this broker first serves as master)."""
        if self.config.ha_advertised_address:
            return self.config.ha_advertised_address
        port = self.server.port if self.server is not None else self._ha_port
        return f"{self.config.advertised_host}:{port}" if port else ""

    async def start(self) -> None:
        """Apply the configured role (the store is started)."""
        self._started = True
        await self._apply(self.role.state)

    async def stop(self) -> None:
        self._started = False
        if self.acks is not None:
            self.acks.fail_all()
            self.acks = None
        if self.client is not None:
            await self.client.stop()
            self.client = None
        if self.server is not None:
            await self.server.close()
            self.server = None

    # ------------------------------------------------------------------ figures

    def lag_bytes(self) -> dict[str, int]:
        """A master's replicas and the bytes each still lacks (empty on a replica)."""
        return self.server.lag_bytes() if self.server is not None else {}

    def copies_here(self, broker_id: int) -> bool:
        """Whether replica ``broker_id`` of this broker's group may count as copying this
        master's log in controller mode: where replicas must authenticate, only one
        connected to the HA port with a frame naming this group and that id (a member
        refused there holds nothing it was sent); elsewhere any (the members' own
        accounts of their logs decide, as before)."""
        auth = self.auth
        if not auth.required or auth.allow_unauthenticated:
            return True
        server = self.server
        return server is not None and (
            self.config.broker_name, broker_id) in server.authenticated_brokers()

    def runtime_info(self) -> dict[str, str]:
        """The role and replication figures of the runtime-info table: on a master the
        bytes its furthest replica lacks (``slaveFallBehindMuch``, as upstream) and its
        replicas, with each one's lag in bytes and time (``haReplicaStatus``, JSON); on a
        replica its master, the age of the last frame received and its own end of the
        connection (``haLocalAddress``, as the master's ``haReplicaStatus`` names it)."""
        state = self.role.state
        out = {"brokerRole": state.role.value, "brokerId": str(state.broker_id),
               "haEpoch": str(state.epoch)}
        if self.server is not None:
            lags = self.lag_bytes()
            out["slaveFallBehindMuch"] = str(max(lags.values(), default=0))
            out["haReplicas"] = str(len(lags))
            out["haInSyncReplicas"] = str(self.server.in_sync())
            out["haReplicaStatus"] = json.dumps(
                self.server.replica_status(int(time.time() * 1000)), separators=(",", ":"))
        client = self.client
        if client is not None:
            out["haMasterAddress"] = client.master_address
            out["haConnected"] = "true" if client.connected.is_set() else "false"
            age = time.monotonic() - client.last_frame if client.last_frame else -1.0
            out["haLastFrameAgeMs"] = f"{age * 1000:.0f}" if age >= 0 else "-1"
            out["haLocalAddress"] = client.local_address
            out["haLastError"] = client.last_error
        return out

    # ------------------------------------------------------------------ roles

    async def _apply(self, state: RoleState) -> None:
        if not self._started:
            return
        if state.is_master:
            await self._become_master(state)
        else:
            await self._become_replica(state)
        log.info("broker role: %s (brokerId %d, epoch %d%s)", state.role.value,
                 state.broker_id, state.epoch,
                 f", master {state.master_ha_address}" if state.master_ha_address else "")

    async def _become_master(self, state: RoleState) -> None:
        if self.client is not None:
            await self.client.stop()
            self.client = None
        if self.server is not None and self._server_epoch != state.epoch:
            # kept open through a lapsed lease, but master of another epoch now: the
            # replicas connect again, as to any new master
            await self.server.close()
            self.server = None
        self._server_epoch = state.epoch
        self.store.replica = False
        if self.server is None:
            cfg = self.config
            server = HaServer(self.store, cfg.bind_address, self._ha_port,
                              batch_size=cfg.ha_transfer_batch_size,
                              heartbeat_ms=cfg.ha_send_heartbeat_interval,
                              housekeeping_ms=cfg.ha_housekeeping_interval,
                              max_gap_not_in_sync=cfg.ha_max_gap_not_in_sync,
                              tls=cfg.tls_server, auth=self.auth)
            try:
                await server.start()
            except OSError as exc:
                raise ConfigError(f"the HA port cannot be bound ({exc.strerror or exc}): set "
                                  "haListenPort (by default listenPort + 1; 0: any free port)",
                                  key="haListenPort") from None
            if not self.auth.required:
                # Replicas need no credentials: whoever reaches this port can copy the log.
                warn_if_exposed(log, "the broker's HA port", cfg.bind_address,
                                reach="copy every stored message (without aclEnable or "
                                      "authenticationEnabled replicas need no credentials)")
            elif self.auth.allow_unauthenticated:
                log.warning("haAllowUnauthenticated=true: replicas that send no "
                            "authentication frame may copy every stored message from the "
                            "HA port %s:%d", cfg.bind_address, server.port)
            self._ha_port = server.port  # the same address after a later restart
            server.on_report.append(self._on_report)
            self.server = server
        if state.role is BrokerRole.SYNC_MASTER:
            if self.acks is None:
                server = self.server
                standing = self.standing
                self.acks = ReplicaAcks(
                    self.policy, server.acked_offsets, server.in_sync, self._answer,
                    self.config.slave_timeout / 1000,
                    limit=standing.limit if standing is not None else None,
                    want=standing.want if standing is not None else None)
        elif self.acks is not None:
            self.acks.fail_all()
            self.acks = None

    async def _become_replica(self, state: RoleState) -> None:
        if self.acks is not None:
            self.acks.fail_all()
            self.acks = None
        if self.server is not None and not state.lapsed:
            await self.server.close()
            self.server = None
        self.store.replica = True
        client = self.client
        if client is not None and client.master_address != state.master_ha_address:
            await client.stop()
            client = self.client = None
        if client is None and state.master_ha_address:
            cfg = self.config
            client = self.client = HaClient(
                self.store, state.master_ha_address,
                max_frame=max(cfg.ha_transfer_batch_size, MAX_FRAME) + FRAME_HEADER_SIZE,
                heartbeat_ms=cfg.ha_send_heartbeat_interval,
                housekeeping_ms=cfg.ha_housekeeping_interval, tls=cfg.tls_client.context(),
                identity=self.identity)
            client.start()

    def _answer(self, item: Any, code: int) -> None:
        self.complete(item, code)

    def _on_report(self) -> None:
        if self.acks is not None:
            self.acks.on_report()

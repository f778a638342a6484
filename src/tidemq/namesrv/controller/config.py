"""Controller settings, read from the same ``.properties`` as the name server's when the
controller runs inside it (``enableControllerInNamesrv=true``), or on their own for a
standalone ``tidemq controller``.

``controllerRaftPeers`` lists every controller's Raft endpoint as ``id-host:port``,
``;``-separated (the shape of upstream's ``controllerDLegerPeers``), and
``controllerRaftSelfId`` names this one; the Raft port is separate from the port brokers
and ``tidemq admin`` talk to. Three controllers tolerate the loss of one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import load_config
from tidemq.namesrv.controller.config_overrides import overrides_path, read_overrides
from tidemq.namesrv.controller.store_dir import store_dir
from tidemq.net.acl.auth_keys import check_copy_keys
from tidemq.net.bind import check_listen, is_loopback
from tidemq.net.server_keys import AclKeys
from tidemq.store.kept_overrides import load_with_kept

__all__ = ["ControllerConfig", "load_controller_config", "parse_peers"]



def parse_peers(text: str) -> dict[str, str]:
    """``"n0-127.0.0.1:9880;n1-127.0.0.1:9881"`` -> ``{"n0": "127.0.0.1:9880", ...}``."""
    peers: dict[str, str] = {}
    for raw in text.replace(",", ";").split(";"):
        part = raw.strip()
        if not part:
            continue
        peer_id, sep, address = part.partition("-")
        host, colon, port = address.rpartition(":")
        if not sep or not peer_id or not colon or not host or not port.isdigit():
            raise ConfigError(f"controllerRaftPeers: {part!r} is not id-host:port",
                              key="controllerRaftPeers")
        if peer_id in peers:
            raise ConfigError(f"controllerRaftPeers: id {peer_id!r} appears twice",
                              key="controllerRaftPeers")
        peers[peer_id] = address
    return peers


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig(AclKeys):
    """A controller's keys; its port's TLS (``tls.server.*``) and ACL keys apply to a
    standalone controller (one inside a name server is served on the name server's port,
    with the name server's), as do ``tls.enable`` and ``tls.client.*``, for its copy of
    the brokers' ACL 2.0 users."""

    #: Run the controller inside the name server (its requests on the name server's port).
    enable_controller_in_namesrv: bool = False
    #: Standalone controller: the port brokers and admin tools reach it on.
    listen_port: int = 9878
    #: Standalone controller: the address it listens on (loopback unless told otherwise).
    bind_address: str = "127.0.0.1"
    #: Every controller's Raft endpoint, ``id-host:port;...``.
    controller_raft_peers: str = ""
    #: This controller's id in ``controllerRaftPeers``.
    controller_raft_self_id: str = ""
    #: The Raft log's directory, locked while the controller runs. Empty: beside the
    #: name server's files (``kvConfigPath``) for a controller inside one that keeps
    #: files, else ``~/tidemq/controller/<controllerRaftSelfId>``; ``memory``: memory
    #: only (a restarted controller then catches up from its peers, and changes only it
    #: had acknowledged can be lost). See :mod:`~tidemq.namesrv.controller.store_dir`.
    controller_store_path: str = ""
    #: A broker not heard from for this many ms has lost its lease; a master that loses it
    #: is replaced. A broker's heartbeat may name its own (``heartbeatTimeoutMills``).
    controller_broker_heartbeat_timeout: int = 3000
    #: How often the leading controller looks for lapsed master leases, ms.
    controller_scan_interval: int = dataclasses.field(
        default=250, metadata={"aliases": ("scanNotActiveBrokerInterval",)})
    #: Elect a broker outside the sync-state set when none in it is alive (may lose
    #: acknowledged messages).
    enable_elect_unclean_master: bool = False
    #: The largest remoting frame accepted or sent, bytes; a larger request is answered
    #: MESSAGE_ILLEGAL and skipped, the connection kept.
    max_frame_size: int = 16 * 1024 * 1024
    #: Encrypt and authenticate the Raft traffic between controllers with a key derived
    #: from this password (PySyncObj's ``password``: Fernet, AES-128-CBC and HMAC-SHA256);
    #: every controller needs the same. Empty: the Raft traffic is plain.
    controller_raft_password: str = dataclasses.field(default="", repr=False)
    #: Start even though the Raft port is beyond loopback and has no password. PySyncObj
    #: unpickles what it receives, so whoever reaches that port can run code in the
    #: controller: only for Raft ports on a network that nothing else reaches.
    controller_raft_allow_unauthenticated: bool = False
    #: The broker whose users are copied (``host:port``); empty: the master of the first
    #: broker group the controllers know, clusters and names in sorted order.
    auth_metadata_broker: str = ""
    #: Seconds between two copies of the users.
    auth_metadata_refresh_seconds: float = 5.0

    def __post_init__(self) -> None:
        peers = parse_peers(self.controller_raft_peers)
        if self.controller_raft_peers and self.controller_raft_self_id not in peers:
            raise ConfigError(
                f"controllerRaftSelfId {self.controller_raft_self_id!r} is not one of "
                f"controllerRaftPeers ({', '.join(peers)})", key="controllerRaftSelfId")
        check_listen(self.bind_address, self.listen_port, 0)
        if not self.enable_controller_in_namesrv:
            self.tls_server.check()
            self.tls_client.check()
        self.check_acl_keys()
        check_copy_keys(authentication_enabled=self.authentication_enabled,
                        credentials=(self.auth_credentials if self.authentication_enabled
                                     else None),
                        refresh_seconds=self.auth_metadata_refresh_seconds)
        if self.controller_broker_heartbeat_timeout <= 0:
            raise ConfigError("controllerBrokerHeartbeatTimeout must be positive",
                              key="controllerBrokerHeartbeatTimeout")
        if self.controller_scan_interval <= 0:
            raise ConfigError("controllerScanInterval must be positive",
                              key="controllerScanInterval")

    def replace(self, **changes: Any) -> ControllerConfig:
        return dataclasses.replace(self, **changes)

    @property
    def peers(self) -> dict[str, str]:
        return parse_peers(self.controller_raft_peers)

    @property
    def raft_address(self) -> str:
        """This controller's Raft endpoint (a single controller when no peers are set)."""
        if not self.controller_raft_peers:
            raise ConfigError("controllerRaftPeers is not set", key="controllerRaftPeers")
        return self.peers[self.controller_raft_self_id]

    @property
    def raft_exposed(self) -> bool:
        """Whether this controller's Raft port is beyond loopback without a password."""
        host = self.raft_address.rpartition(":")[0].strip("[]")
        return not self.controller_raft_password and not is_loopback(host)

    @property
    def raft_partners(self) -> list[str]:
        me = self.controller_raft_self_id
        return [addr for peer, addr in self.peers.items() if peer != me]


def load_controller_config(
    path: str | Path | None = None, *, overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None, beside: Path | None = None,
) -> tuple[ControllerConfig, list[str]]:
    """The config from a file, the keys changed at run time
    (:mod:`~tidemq.namesrv.controller.config_overrides`, in the store directory), ``TIDEMQ_*``
    variables and overrides; plus the unknown keys. ``beside``: the directory of the
    embedding name server's files, as :meth:`ControllerApp.start
    <tidemq.namesrv.controller.app.ControllerApp.start>` is given it (``data_dir``)."""
    config, unknown = load_config(ControllerConfig, path, overrides=overrides, env=env)
    if not config.controller_raft_peers:
        return config, unknown  # not a controller that can start: it keeps nothing
    kept_path = overrides_path(store_dir(config.controller_store_path,
                                         config.controller_raft_self_id, beside=beside))
    if kept_path is None:
        return config, unknown
    return load_with_kept(ControllerConfig, path, (config, unknown), kept_path,
                          read_overrides(kept_path), overrides=overrides, env=env)

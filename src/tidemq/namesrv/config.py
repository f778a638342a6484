"""Name-server settings under RocketMQ's key names (``NamesrvConfig`` + ``NettyServerConfig``).

A RocketMQ ``namesrv.properties`` is read with :func:`load_namesrv_config`; a key this
config does not know is returned as unknown so the caller reports it, never silently
ignored. Precedence, lowest first: defaults, the ``.properties`` file, ``TIDEMQ_<KEY>``
the keys changed at run time (:mod:`tidemq.namesrv.config_overrides`), ``TIDEMQ_<KEY>``
environment variables (``TIDEMQ_LISTENPORT=9876`` or ``TIDEMQ_LISTEN_PORT``), explicit
overrides (command-line flags).

``brokerChannelExpiredTime`` is a constant upstream (``DEFAULT_BROKER_CHANNEL_EXPIRED_TIME``,
two minutes); here it is the liveness timeout of a broker that registers without
``heartbeatTimeoutMillis``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import load_config
from tidemq.namesrv.config_overrides import overrides_path, read_overrides
from tidemq.net.acl.auth_keys import check_copy_keys
from tidemq.net.bind import check_listen
from tidemq.net.server_keys import ServerKeys
from tidemq.store.kept_overrides import load_with_kept

__all__ = ["NamesrvConfig", "load_namesrv_config"]



@dataclasses.dataclass(frozen=True, slots=True)
class NamesrvConfig(ServerKeys):
    #: The port brokers and clients connect to, on ``bindAddress`` (0: any free port).
    listen_port: int = 9876
    #: Milliseconds between two scans for brokers whose registration is too old.
    scan_not_active_broker_interval: int = 5000
    #: Liveness timeout (ms) of a broker that does not send ``heartbeatTimeoutMillis``.
    broker_channel_expired_time: int = 120_000
    #: Put ``orderTopicConf`` into routes of topics that have an ordered-topic setting.
    order_message_enable: bool = False
    #: Send the ordered-topic settings back in REGISTER_BROKER responses.
    return_order_topic_config_to_broker: bool = True
    #: Answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER (else SYSTEM_ERROR "disable").
    enable_all_topic_list: bool = True
    #: A master's registration is its complete topic list: topics it left out disappear.
    delete_topic_with_broker_registration: bool = False
    #: Answer route queries with SYSTEM_ERROR for the first waitSecondsForService s.
    need_wait_for_service: bool = False
    #: With ``needWaitForService``: seconds after start during which routes are refused.
    wait_seconds_for_service: int = 45
    #: Close client connections silent for this long (NettyServerConfig key).
    server_channel_max_idle_time_seconds: int = 120
    # TideMQ additions
    #: The largest remoting frame accepted or sent, bytes (at least 1024); a larger request
    #: is answered MESSAGE_ILLEGAL and skipped, the connection kept.
    max_frame_size: int = 16 * 1024 * 1024
    #: Receive-buffer bytes (incomplete frames, buffers kept between frames) held over all
    #: connections; past it kept buffers are dropped, then the connections holding the
    #: most for the longest are closed.
    max_incomplete_frame_bytes: int = 256 * 1024 * 1024
    #: Milliseconds after start during which route answers carry
    #: ``routeMayBeIncomplete=true``: brokers known to the previous run may not have
    #: registered again yet, and TideMQ clients keep the brokers they knew meanwhile.
    broker_rejoin_window: int = 35_000
    #: Where the KV config is kept (upstream's ``kvConfig.json`` layout); empty: in
    #: memory only.
    kv_config_path: str = ""
    #: The broker whose users are copied (``host:port``); empty: the master of the first
    #: registered broker name, clusters and names in sorted order.
    auth_metadata_broker: str = ""
    #: Seconds between two copies of the users.
    auth_metadata_refresh_seconds: float = 5.0

    def __post_init__(self) -> None:
        self.check_server_keys()
        check_copy_keys(authentication_enabled=self.authentication_enabled,
                        credentials=(self.auth_credentials if self.authentication_enabled
                                     else None),
                        refresh_seconds=self.auth_metadata_refresh_seconds)
        check_listen(self.bind_address, self.listen_port, self.metrics_port)
        if self.scan_not_active_broker_interval <= 0:
            raise ConfigError("scanNotActiveBrokerInterval must be positive",
                              key="scanNotActiveBrokerInterval")
        if self.broker_channel_expired_time <= 0:
            raise ConfigError("brokerChannelExpiredTime must be positive",
                              key="brokerChannelExpiredTime")
        if self.wait_seconds_for_service < 0:
            raise ConfigError("waitSecondsForService must not be negative",
                              key="waitSecondsForService")
        if self.broker_rejoin_window < 0:
            raise ConfigError("brokerRejoinWindow must not be negative",
                              key="brokerRejoinWindow")
        if self.max_frame_size < 1024:
            raise ConfigError("maxFrameSize must be at least 1024 bytes", key="maxFrameSize")
        if self.max_incomplete_frame_bytes < 1:
            raise ConfigError("maxIncompleteFrameBytes must be positive",
                              key="maxIncompleteFrameBytes")

    def replace(self, **changes: Any) -> NamesrvConfig:
        return dataclasses.replace(self, **changes)

    @property
    def data_dir(self) -> Path | None:
        """The directory of this name server's files (that of ``kvConfigPath``); ``None``
        when it keeps none."""
        return Path(self.kv_config_path).parent if self.kv_config_path else None

    @property
    def idle_seconds(self) -> float | None:
        """The connection idle timeout; ``None`` (never) when the setting is 0 or less."""
        seconds = self.server_channel_max_idle_time_seconds
        return float(seconds) if seconds > 0 else None


def load_namesrv_config(
    path: str | Path | None = None, *, overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[NamesrvConfig, list[str]]:
    """The config from a file, the keys changed at run time, ``TIDEMQ_*`` variables and
    overrides; plus the unknown keys.

    ``env`` defaults to ``os.environ``. Unknown keys come from the file and the overrides
    (environment variables that name no key are not ours to report).
    """
    config, unknown = load_config(NamesrvConfig, path, overrides=overrides, env=env)
    kept_path = overrides_path(config.kv_config_path)
    if kept_path is None:
        return config, unknown
    return load_with_kept(NamesrvConfig, path, (config, unknown), kept_path,
                          read_overrides(kept_path), overrides=overrides, env=env)

"""ClientConfig: the settings every producer, consumer and admin client shares.

Names follow the Java ``ClientConfig`` / ``DefaultMQProducer`` settings in snake case
(``namesrvAddr`` -> ``namesrv_addr``, ``compressMsgBodyOverHowmuch`` ->
``compress_msg_body_over_howmuch`` ...). Durations are seconds (floats), sizes bytes.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Sequence

from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.codec.signature import Credentials
from tidemq.codec.trace import DEFAULT_TRACE_TOPIC
from tidemq.errors import ConfigError
from tidemq.net.address import parse_address
from tidemq.net.tls import TlsClientSettings

__all__ = ["ACCESS_KEY_ENV", "DEFAULT_NAMESRV", "MAX_FRAME_SIZE_ENV", "MSG_TRACE_ENV",
           "SECRET_KEY_ENV",
           "TLS_CA_ENV", "TLS_CERT_ENV", "TLS_ENV", "TLS_KEY_ENV", "TLS_KEY_PASSWORD_ENV",
           "TRACE_COMPRESSIONS",
           "ClientConfig", "detect_client_ip", "parse_namesrv"]

DEFAULT_NAMESRV = "127.0.0.1:9876"
#: The environment's account, used when a config gives none.
ACCESS_KEY_ENV = "TIDEMQ_ACCESS_KEY"
SECRET_KEY_ENV = "TIDEMQ_SECRET_KEY"
#: The environment's TLS settings, used for what a config leaves unset.
TLS_ENV = "TIDEMQ_TLS"
TLS_CA_ENV = "TIDEMQ_TLS_CA"
TLS_CERT_ENV = "TIDEMQ_TLS_CERT"
TLS_KEY_ENV = "TIDEMQ_TLS_KEY"
TLS_KEY_PASSWORD_ENV = "TIDEMQ_TLS_KEY_PASSWORD"
#: The environment's message-trace switch, used when a config leaves it unset.
MSG_TRACE_ENV = "TIDEMQ_MSG_TRACE"
#: The environment's largest frame, bytes, used when a config leaves it unset.
MAX_FRAME_SIZE_ENV = "TIDEMQ_MAX_FRAME_SIZE"
#: The values of ``trace_compression``.
TRACE_COMPRESSIONS = ("zstd", "zlib", "lz4", "none")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})
_SPLIT = re.compile(r"[;,\s]+")


def parse_namesrv(value: str | Sequence[str]) -> tuple[str, ...]:
    """``"a:9876;b:9876"`` (also commas or spaces) or a sequence -> address tuple."""
    items = _SPLIT.split(value) if isinstance(value, str) else list(value)
    addrs = tuple(a.strip() for a in items if a and a.strip())
    for addr in addrs:
        parse_address(addr)  # raises ConfigError naming the bad one
    return addrs


def detect_client_ip(target: str | None = None) -> str:
    """The local IP that routes towards ``target`` (a name server), else 127.0.0.1.

    A UDP ``connect`` only picks the route: no packet is sent.
    """
    if target:
        try:
            host, port = parse_address(target)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect((host, port))
                return str(probe.getsockname()[0])
        except (OSError, ConfigError):
            pass
    return "127.0.0.1"


def _env_switch(name: str) -> bool:
    """The true/false environment variable ``name`` (unset: false)."""
    raw = os.environ.get(name, "").strip().lower()
    if raw not in _TRUE and raw not in _FALSE:
        raise ConfigError(f"{name}={raw!r}: expected true or false", key=name)
    return raw in _TRUE


@dataclasses.dataclass(frozen=True, slots=True)
class ClientConfig:
    """Settings shared by the clients of one :class:`~tidemq.client.instance.ClientInstance`."""

    namesrv_addr: tuple[str, ...] = (DEFAULT_NAMESRV,)
    instance_name: str = "DEFAULT"
    client_ip: str = ""
    #: Timeout of one ordinary request (route, offsets, admin), seconds.
    request_timeout: float = 3.0
    #: Total budget of one send, retries included, seconds.
    send_msg_timeout: float = 3.0
    #: Extra attempts of a send after a retriable failure (on another broker if any).
    retry_times_when_send_failed: int = 2
    #: Bodies at least this long are compressed (0 disables).
    compress_msg_body_over_howmuch: int = 4096
    #: Largest body (a batch: the encoded batch) a producer accepts, bytes.
    max_message_size: int = 4 * 1024 * 1024
    #: Seconds between two periodic route refreshes, each fetching every cached route:
    #: the longest a producer keeps sending elsewhere after a master is back.
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    #: Template topic for auto-creation and its queue count per broker (remoting.md §2.3).
    default_topic: str = "TBW102"
    default_topic_queue_nums: int = 4
    #: Messages asked for in one pull.
    pull_batch_size: int = 32
    #: How long the broker may hold a pull that found nothing (long polling), seconds.
    long_polling_timeout: float = 15.0
    #: Pause before pulling a queue again after an error, seconds.
    pull_error_backoff: float = 3.0
    #: Coalesce sends, pulls and offset requests per broker into batch-protocol RPCs
    #: where the broker supports them (tidemq.client.batch_rpc).
    batch_protocol_enable: bool = True
    #: The account every request is signed with (RocketMQ ACL 1.0), for brokers and name
    #: servers with ``aclEnable=true``. Both empty: ``TIDEMQ_ACCESS_KEY`` and
    #: ``TIDEMQ_SECRET_KEY`` from the environment, else unsigned.
    access_key: str = ""
    secret_key: str = dataclasses.field(default="", repr=False)
    #: Connect to name servers and brokers with TLS (Java's ``useTLS``). ``None``:
    #: ``TIDEMQ_TLS`` from the environment, else on when a CA file is given.
    use_tls: bool | None = None
    #: CA certificates (PEM) that sign the servers' certificates; empty: ``TIDEMQ_TLS_CA``,
    #: else the system's CAs.
    tls_trust_cert_path: str = ""
    #: A client certificate and key, for servers with ``tls.server.need.client.auth``;
    #: empty: ``TIDEMQ_TLS_CERT`` / ``TIDEMQ_TLS_KEY`` (and ``TIDEMQ_TLS_KEY_PASSWORD``).
    tls_cert_path: str = ""
    tls_key_path: str = ""
    tls_key_password: str = dataclasses.field(default="", repr=False)
    #: Verify the server's certificate and that it names the host connected to.
    tls_auth_server: bool = True
    #: Record message trace (Java's ``enableMsgTrace``): producers record a Pub event per
    #: message sent, consumers SubBefore/SubAfter per message consumed, sent in the
    #: background to ``trace_topic`` (:mod:`tidemq.client.tracer`). ``None``:
    #: ``TIDEMQ_MSG_TRACE`` from the environment, else off.
    enable_msg_trace: bool | None = None
    trace_topic: str = DEFAULT_TRACE_TOPIC
    #: Trace events queued at most; past it events are dropped and counted.
    trace_queue_size: int = 20_000
    #: How trace messages of at least ``compress_msg_body_over_howmuch`` bytes are
    #: compressed: ``zlib`` (what Java's trace producer sends; every RocketMQ reader,
    #: 4 and 5, inflates it), ``zstd`` (at its fastest level; RocketMQ 5 readers only),
    #: ``lz4`` (RocketMQ 5 readers only) or ``none``.
    trace_compression: str = "zlib"
    #: The largest frame sent or accepted, bytes (RocketMQ's 16 MiB): an answer over it
    #: fails its request. Raise it with the brokers' ``maxFrameSize`` for tables that large
    #: (the consumer offsets of many groups). ``None``: ``TIDEMQ_MAX_FRAME_SIZE`` from the
    #: environment, else 16 MiB.
    max_frame_size: int | None = None

    def __post_init__(self) -> None:
        self._tls_from_env()
        self._frame_size_from_env()
        if self.enable_msg_trace is None:
            object.__setattr__(self, "enable_msg_trace", _env_switch(MSG_TRACE_ENV))
        if self.trace_queue_size < 1:
            raise ConfigError("trace_queue_size must be positive", key="trace_queue_size")
        if not self.trace_topic:
            raise ConfigError("trace_topic is empty", key="trace_topic")
        if self.trace_compression not in TRACE_COMPRESSIONS:
            raise ConfigError(f"trace_compression {self.trace_compression!r} is not one of "
                              f"{', '.join(TRACE_COMPRESSIONS)}", key="trace_compression")
        if not self.access_key and not self.secret_key:
            object.__setattr__(self, "access_key", os.environ.get(ACCESS_KEY_ENV, ""))
            object.__setattr__(self, "secret_key", os.environ.get(SECRET_KEY_ENV, ""))
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("access_key and secret_key go together",
                              key="secret_key" if self.access_key else "access_key")
        addrs = parse_namesrv(self.namesrv_addr)
        if not addrs:
            raise ConfigError("namesrv_addr names no name server", key="namesrv_addr")
        object.__setattr__(self, "namesrv_addr", addrs)
        if not self.client_ip:
            object.__setattr__(self, "client_ip", detect_client_ip(addrs[0]))
        if self.retry_times_when_send_failed < 0:
            raise ConfigError("retry_times_when_send_failed must be >= 0",
                              key="retry_times_when_send_failed")
        for key in ("request_timeout", "send_msg_timeout", "poll_name_server_interval",
                    "heartbeat_broker_interval"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{key} must be positive", key=key)
        if self.max_frame_size is not None and self.max_frame_size < 1024:
            raise ConfigError(f"max_frame_size {self.max_frame_size} is under 1024 bytes",
                              key="max_frame_size")
        if self.max_message_size <= 0:
            raise ConfigError("max_message_size must be positive", key="max_message_size")

    @classmethod
    def for_namesrv(cls, namesrv: str | Sequence[str] | None = None,
                    config: ClientConfig | None = None) -> ClientConfig:
        """``config`` (or the defaults) with ``namesrv`` as its name servers when given."""
        if namesrv is None:
            return config if config is not None else cls()
        addrs = parse_namesrv(namesrv)
        if config is None:
            return cls(namesrv_addr=addrs)
        return dataclasses.replace(config, namesrv_addr=addrs)

    @property
    def client_id(self) -> str:
        """``ip@instanceName@pid``: what brokers list as this client."""
        return f"{self.client_ip}@{self.instance_name}@{os.getpid()}"

    @property
    def credentials(self) -> Credentials | None:
        """What requests are signed with (``None``: unsigned)."""
        if not self.access_key:
            return None
        return Credentials(self.access_key, self.secret_key)

    @property
    def frame_limit(self) -> int:
        """:attr:`max_frame_size` as set or as the environment gave it, else the default."""
        return self.max_frame_size or DEFAULT_MAX_FRAME_SIZE

    def _frame_size_from_env(self) -> None:
        if self.max_frame_size is not None:
            return
        raw = os.environ.get(MAX_FRAME_SIZE_ENV, "").strip()
        if not raw:  # the default (frame_limit)
            return
        try:
            size = int(raw)
        except ValueError:
            raise ConfigError(f"{MAX_FRAME_SIZE_ENV}={raw!r} is not a number of bytes",
                              key=MAX_FRAME_SIZE_ENV) from None
        object.__setattr__(self, "max_frame_size", size)

    def _tls_from_env(self) -> None:
        for field, env in (("tls_trust_cert_path", TLS_CA_ENV), ("tls_cert_path", TLS_CERT_ENV),
                           ("tls_key_path", TLS_KEY_ENV),
                           ("tls_key_password", TLS_KEY_PASSWORD_ENV)):
            if not getattr(self, field):
                object.__setattr__(self, field, os.environ.get(env, ""))
        if self.use_tls is None:
            raw = os.environ.get(TLS_ENV, "").strip().lower()
            enabled = _env_switch(TLS_ENV) or (not raw and bool(self.tls_trust_cert_path))
            object.__setattr__(self, "use_tls", enabled)
        self.tls.check()

    @property
    def tls(self) -> TlsClientSettings:
        """The TLS settings of every connection this client opens."""
        return TlsClientSettings(
            enable=bool(self.use_tls), trust_cert_path=self.tls_trust_cert_path,
            cert_path=self.tls_cert_path, key_path=self.tls_key_path,
            key_password=self.tls_key_password, auth_server=self.tls_auth_server)

    @property
    def pull_rpc_timeout(self) -> float:
        """RPC timeout of a long-polling pull: the broker's hold plus a margin."""
        return self.long_polling_timeout + max(self.request_timeout, 5.0)

"""The settings every remoting server has, whatever it serves: where it listens, TLS on its
port (RocketMQ's ``TlsSystemConfig`` keys, :mod:`tidemq.net.tls`), TLS of its own
connections to other servers, who may send it requests (ACL 1.0 and 2.0) and its
Prometheus endpoint (port, address, credentials, HTTPS). :class:`ServerKeys` is the base of
the broker's and the name server's configs, :class:`AclKeys` (TLS and ACL keys) of a
standalone controller's, so all read the same keys the same way."""

from __future__ import annotations

import dataclasses

from tidemq.errors import ConfigError
from tidemq.net.acl.auth_keys import init_user, inner_credentials
from tidemq.net.http_auth import MetricsAuth
from tidemq.net.tls import TlsClientSettings, TlsMode, TlsServerSettings

__all__ = ["AclKeys", "ServerKeys", "TlsKeys", "TlsServerKeys"]


@dataclasses.dataclass(frozen=True, slots=True)
class TlsServerKeys:
    """TLS on a remoting port: RocketMQ's ``tls.server.*`` keys (:mod:`tidemq.net.tls`),
    the base of every server's config (a standalone controller's too)."""

    #: TLS on the remoting port: disabled, permissive (TLS and plain on one port) or
    #: enforcing (TLS only). Without a certificate the port is plain.
    tls_server_mode: str = dataclasses.field(default="permissive",
                                             metadata={"key": "tls.server.mode"})
    #: The remoting port's certificate chain (PEM).
    tls_server_cert_path: str = dataclasses.field(default="",
                                                  metadata={"key": "tls.server.certPath"})
    #: The private key of ``tls.server.certPath`` (PEM); the two go together.
    tls_server_key_path: str = dataclasses.field(default="",
                                                 metadata={"key": "tls.server.keyPath"})
    #: The password of an encrypted ``tls.server.keyPath`` (empty: not encrypted).
    tls_server_key_password: str = dataclasses.field(
        default="", repr=False, metadata={"key": "tls.server.keyPassword"})
    #: none, optional or require: ask clients for a certificate signed by
    #: ``tls.server.trustCertPath``.
    tls_server_need_client_auth: str = dataclasses.field(
        default="none", metadata={"key": "tls.server.need.client.auth"})
    #: The CAs (PEM) that client certificates are checked against (empty: the system's).
    tls_server_trust_cert_path: str = dataclasses.field(
        default="", metadata={"key": "tls.server.trustCertPath"})

    @property
    def tls_server(self) -> TlsServerSettings:
        """The remoting port's TLS settings."""
        return TlsServerSettings.parse(
            mode=self.tls_server_mode, cert_path=self.tls_server_cert_path,
            key_path=self.tls_server_key_path, key_password=self.tls_server_key_password,
            need_client_auth=self.tls_server_need_client_auth,
            trust_cert_path=self.tls_server_trust_cert_path)


@dataclasses.dataclass(frozen=True, slots=True)
class TlsKeys(TlsServerKeys):
    """TLS on a remoting port and on the server's own connections to other servers
    (RocketMQ's ``tls.enable`` and ``tls.client.*`` keys): the base of every server's
    config, a standalone controller's too (it asks brokers for their ACL 2.0 users)."""

    #: Connect to other servers (name servers, brokers) with TLS (``tls.enable``),
    #: trusting the CAs of ``tls.client.trustCertPath``; a client certificate for servers
    #: that ask.
    tls_enable: bool = dataclasses.field(default=False, metadata={"key": "tls.enable"})
    #: The CAs (PEM) that other servers' certificates are checked against (empty: the system's).
    tls_client_trust_cert_path: str = dataclasses.field(
        default="", metadata={"key": "tls.client.trustCertPath"})
    #: The certificate chain (PEM) this server shows to servers that ask for one.
    tls_client_cert_path: str = dataclasses.field(default="",
                                                  metadata={"key": "tls.client.certPath"})
    #: The private key of ``tls.client.certPath`` (PEM; empty: in the certificate's file).
    tls_client_key_path: str = dataclasses.field(default="",
                                                 metadata={"key": "tls.client.keyPath"})
    #: The password of an encrypted ``tls.client.keyPath`` (empty: not encrypted).
    tls_client_key_password: str = dataclasses.field(
        default="", repr=False, metadata={"key": "tls.client.keyPassword"})
    #: Check the other servers' certificates and host names (false: accept any certificate).
    tls_client_auth_server: bool = dataclasses.field(
        default=True, metadata={"key": "tls.client.authServer"})

    @property
    def tls_client(self) -> TlsClientSettings:
        """TLS of this server's own connections (to name servers, other brokers)."""
        return TlsClientSettings(
            enable=self.tls_enable, trust_cert_path=self.tls_client_trust_cert_path,
            cert_path=self.tls_client_cert_path, key_path=self.tls_client_key_path,
            key_password=self.tls_client_key_password, auth_server=self.tls_client_auth_server)


@dataclasses.dataclass(frozen=True, slots=True)
class AclKeys(TlsKeys):
    """Who may send the server requests: ACL 1.0 (``aclEnable``, a ``plain_acl.yml``) or
    ACL 2.0 (RocketMQ 5.3's users and policies). A broker checks requests against its own
    user store; a name server or a standalone controller, which keep none, against a copy
    of a broker's (:mod:`tidemq.namesrv.auth_mirror`)."""

    #: Check every request against the accounts of ``aclFile`` (RocketMQ's key).
    acl_enable: bool = False
    #: The ``plain_acl.yml`` read when ``aclEnable`` is true (read again when it changes).
    acl_file: str = ""
    #: ACL 2.0: every request must be signed by a known user (docs/security.md). Not
    #: together with ``aclEnable``.
    authentication_enabled: bool = False
    #: ACL 2.0: check each request against its user's policies (needs
    #: ``authenticationEnabled``); off, every signed-in user may do everything.
    authorization_enabled: bool = False
    #: ACL 2.0: a Super user, as JSON ``{"username": "...", "password": "..."}``. A broker
    #: creates it at start if no user of that name exists, so that a fresh broker with
    #: authentication on is not locked out; a name server or controller knows it before
    #: its first copy of the brokers' users (the brokers register with it).
    init_authentication_user: str = dataclasses.field(default="", repr=False)
    #: ACL 2.0: what the server signs its own requests to brokers with, as JSON
    #: ``{"accessKey": "...", "secretKey": "..."}``: a broker's to name servers and other
    #: brokers, a name server's or controller's to ask for the copy of the users (default:
    #: ``initAuthenticationUser``).
    inner_client_authentication_credentials: str = dataclasses.field(default="", repr=False)

    def check_acl_keys(self) -> None:
        """Raise :class:`ConfigError` naming the first of these keys that is wrong."""
        if self.acl_enable and not self.acl_file:
            raise ConfigError("aclEnable=true needs aclFile (the plain_acl.yml)",
                              key="aclFile")
        if self.acl_enable and self.authentication_enabled:
            raise ConfigError("aclEnable (ACL 1.0, plain_acl.yml) and authenticationEnabled "
                              "(ACL 2.0, users and policies) exclude each other: choose one",
                              key="authenticationEnabled")
        if self.authorization_enabled and not self.authentication_enabled:
            raise ConfigError("authorizationEnabled=true needs authenticationEnabled=true "
                              "(a policy is only as good as the signature naming its user)",
                              key="authorizationEnabled")
        self.init_user  # noqa: B018 -- checked here, read at start
        inner_credentials(self.inner_client_authentication_credentials)

    @property
    def init_user(self) -> tuple[str, str] | None:
        """``initAuthenticationUser`` as (username, password)."""
        return init_user(self.init_authentication_user)

    @property
    def auth_credentials(self) -> tuple[str, str] | None:
        """What a name server or controller asks for the copy of the users with:
        ``innerClientAuthenticationCredentials``, else ``initAuthenticationUser``."""
        return inner_credentials(self.inner_client_authentication_credentials) or self.init_user


@dataclasses.dataclass(frozen=True, slots=True)
class ServerKeys(AclKeys):
    #: The address the server listens on (``NettyServerConfig.bindAddress``); loopback
    #: unless told otherwise, ``0.0.0.0`` for every interface.
    bind_address: str = "127.0.0.1"
    #: Serve Prometheus metrics over HTTP on this port (0: off).
    metrics_port: int = 0
    #: The address the metrics endpoint listens on (empty: ``bindAddress``).
    metrics_bind_address: str = ""
    #: ``/metrics`` needs ``Authorization: Bearer <token>`` (empty: no token).
    metrics_auth_token: str = dataclasses.field(default="", repr=False)
    #: ``/metrics`` needs HTTP basic auth with this user and ``metricsAuthPassword``.
    metrics_auth_user: str = ""
    #: The password of ``metricsAuthUser``.
    metrics_auth_password: str = dataclasses.field(default="", repr=False)
    #: Serve the metrics over HTTPS with this certificate and key (PEM; both empty: HTTP).
    metrics_cert_path: str = ""
    #: The private key of ``metricsCertPath`` (PEM).
    metrics_key_path: str = ""

    def check_server_keys(self) -> None:
        """Raise :class:`ConfigError` naming the first of these keys that is wrong."""
        self.check_acl_keys()
        self.tls_server.check()
        self.tls_client.check()
        if bool(self.metrics_auth_user) != bool(self.metrics_auth_password):
            raise ConfigError("metricsAuthUser and metricsAuthPassword go together",
                              key="metricsAuthPassword")
        if bool(self.metrics_cert_path) != bool(self.metrics_key_path):
            raise ConfigError("metricsCertPath and metricsKeyPath go together",
                              key="metricsKeyPath" if self.metrics_cert_path
                              else "metricsCertPath")

    @property
    def metrics_tls(self) -> TlsServerSettings | None:
        """The metrics endpoint's HTTPS settings (``None``: plain HTTP)."""
        if not self.metrics_cert_path:
            return None
        return TlsServerSettings(mode=TlsMode.ENFORCING, cert_path=self.metrics_cert_path,
                                 key_path=self.metrics_key_path)

    @property
    def metrics_host(self) -> str:
        """Where the metrics endpoint listens."""
        return self.metrics_bind_address or self.bind_address

    @property
    def metrics_auth(self) -> MetricsAuth | None:
        """The credentials ``/metrics`` needs; None: it needs none."""
        return MetricsAuth.from_config(self.metrics_auth_token, self.metrics_auth_user,
                                       self.metrics_auth_password)

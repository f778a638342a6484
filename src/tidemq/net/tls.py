"""TLS settings and the ``ssl.SSLContext``\\s built from them: the one place that does.

Servers (the remoting ports of broker and name server, the metrics and console HTTP
endpoints, later the HA port) and clients (producers, consumers, admin, the broker's own
connections to name servers and other brokers) take a :class:`TlsServerSettings` or a
:class:`TlsClientSettings` and ask it for a context. The key names are RocketMQ's
``TlsSystemConfig`` properties:

============================  ========================  ====================================
key                           default                   meaning
============================  ========================  ====================================
tls.server.mode               permissive                disabled, permissive (TLS and plain
                                                        on one port), enforcing (TLS only)
tls.server.certPath           (none)                    PEM certificate chain of the server
tls.server.keyPath            (none)                    PEM private key of that certificate
tls.server.keyPassword        (none)                    password of an encrypted key
tls.server.need.client.auth   none                      none, optional, require: ask
                                                        clients for a certificate
tls.server.trustCertPath      (none: system CAs)        CAs that sign client certificates
tls.enable                    false                     clients: connect with TLS
tls.client.trustCertPath      (none: system CAs)        CAs that sign server certificates
tls.client.certPath           (none)                    client certificate (for servers
                                                        that ask for one)
tls.client.keyPath            (none)                    its private key
tls.client.keyPassword        (none)                    password of an encrypted key
tls.client.authServer         true                      verify the server's certificate
                                                        and host name
============================  ========================  ====================================

Two deliberate differences from upstream: a server has TLS only when it has a
certificate and key (upstream's test mode makes up a self-signed one), so the default
``permissive`` serves plain connections alone until one is configured; and a client
verifies the server's certificate and host name unless told ``tls.client.authServer=false``
(upstream's default is not to).

A server's context follows its files: :class:`ServerTlsContext` looks at the certificate
and key files (modification time, size, inode) at most once a second, and builds a new context when
they changed, so a renewed certificate is served to new connections without a restart.
A listener that picks the context per connection asks :meth:`ServerTlsContext.current`;
one that takes a single context when it starts (``asyncio.start_server`` behind the
metrics endpoint, uvicorn behind the console) takes
:meth:`ServerTlsContext.handshake_context`, whose every handshake moves to the current one.
A client's follows its CA, certificate and key files the same way
(:class:`ClientTlsContext`), when it dials a connection.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import ssl
import time
from collections.abc import Callable

from tidemq.errors import ConfigError
from tidemq.net.file_stamp import FileStamp, file_stamp

__all__ = ["TLS_HANDSHAKE_BYTE", "ClientAuth", "ClientTlsContext", "ServerTlsContext",
           "TlsClientSettings", "TlsMode", "TlsServerSettings", "describe_tls_failure"]

log = logging.getLogger(__name__)

#: The first byte of every TLS connection (a handshake record, RFC 8446 §5.1).
TLS_HANDSHAKE_BYTE = 0x16


class TlsMode(enum.Enum):
    """``tls.server.mode``."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(enum.Enum):
    """``tls.server.need.client.auth``."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


def _parse(kind: type[enum.Enum], value: str, key: str) -> enum.Enum:
    try:
        return kind(value.strip().lower())
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ConfigError(f"bad value {value!r} for {key}: expected one of {allowed}",
                          key=key) from None


@dataclasses.dataclass(frozen=True, slots=True)
class TlsServerSettings:
    """A server's TLS settings; see the module docstring for the keys."""

    mode: TlsMode = TlsMode.PERMISSIVE
    cert_path: str = ""
    key_path: str = ""
    key_password: str = dataclasses.field(default="", repr=False)
    need_client_auth: ClientAuth = ClientAuth.NONE
    trust_cert_path: str = ""

    @classmethod
    def parse(cls, *, mode: str = "permissive", cert_path: str = "", key_path: str = "",
              key_password: str = "", need_client_auth: str = "none",
              trust_cert_path: str = "") -> TlsServerSettings:
        """Settings from the config's text values; a bad one raises
        :class:`~tidemq.errors.ConfigError` naming its key."""
        settings = cls(
            mode=TlsMode(_parse(TlsMode, mode, "tls.server.mode").value),
            cert_path=cert_path, key_path=key_path, key_password=key_password,
            need_client_auth=ClientAuth(_parse(
                ClientAuth, need_client_auth, "tls.server.need.client.auth").value),
            trust_cert_path=trust_cert_path)
        settings.check()
        return settings

    @property
    def active(self) -> bool:
        """Whether the server does TLS at all (a mode other than disabled, and a
        certificate)."""
        return self.mode is not TlsMode.DISABLED and bool(self.cert_path)

    def check(self) -> None:
        """Raise :class:`~tidemq.errors.ConfigError` for settings that cannot work."""
        if bool(self.cert_path) != bool(self.key_path):
            raise ConfigError("tls.server.certPath and tls.server.keyPath go together",
                              key="tls.server.keyPath" if self.cert_path
                              else "tls.server.certPath")
        if self.mode is TlsMode.ENFORCING and not self.cert_path:
            raise ConfigError("tls.server.mode=enforcing needs tls.server.certPath and "
                              "tls.server.keyPath", key="tls.server.certPath")

    def context(self) -> ssl.SSLContext:
        """A new server context; unreadable or mismatched files raise
        :class:`~tidemq.errors.ConfigError` naming the key."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(ctx, self.cert_path, self.key_path, self.key_password, "tls.server")
        if self.need_client_auth is not ClientAuth.NONE:
            ctx.verify_mode = (ssl.CERT_REQUIRED if self.need_client_auth is ClientAuth.REQUIRE
                               else ssl.CERT_OPTIONAL)
            _load_trust(ctx, self.trust_cert_path, "tls.server.trustCertPath",
                        ssl.Purpose.CLIENT_AUTH)
        return ctx


@dataclasses.dataclass(frozen=True, slots=True)
class TlsClientSettings:
    """A client's TLS settings; see the module docstring for the keys."""

    enable: bool = False
    trust_cert_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    key_password: str = dataclasses.field(default="", repr=False)
    auth_server: bool = True

    def check(self) -> None:
        """Raise :class:`~tidemq.errors.ConfigError` for settings that cannot work."""
        if self.key_path and not self.cert_path:
            raise ConfigError("tls.client.keyPath needs tls.client.certPath",
                              key="tls.client.certPath")

    def context(self) -> ssl.SSLContext | None:
        """A new client context, or ``None`` when TLS is off."""
        if not self.enable:
            return None
        self.check()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.auth_server:
            _load_trust(ctx, self.trust_cert_path, "tls.client.trustCertPath",
                        ssl.Purpose.SERVER_AUTH)
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_path:
            _load_chain(ctx, self.cert_path, self.key_path or self.cert_path,
                        self.key_password, "tls.client")
        return ctx


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, password: str, prefix: str) -> None:
    for path, name in ((cert, "certPath"), (key, "keyPath")):
        if not os.path.isfile(path):
            raise ConfigError(f"{prefix}.{name}: no file {path!r}", key=f"{prefix}.{name}")
    try:
        ctx.load_cert_chain(cert, key, password=password or None)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{prefix}.certPath/keyPath: cannot load the certificate and key "
                          f"({exc}); a wrong {prefix}.keyPassword, a key that does not belong "
                          "to the certificate, or a file that is not PEM",
                          key=f"{prefix}.keyPath") from exc


def _load_trust(ctx: ssl.SSLContext, cafile: str, key: str, purpose: ssl.Purpose) -> None:
    if not cafile:
        ctx.load_default_certs(purpose)
        return
    if not os.path.isfile(cafile):
        raise ConfigError(f"{key}: no file {cafile!r}", key=key)
    try:
        ctx.load_verify_locations(cafile=cafile)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{key}: cannot load CA certificates from {cafile!r} ({exc})",
                          key=key) from exc


def _stamps(paths: tuple[str, ...]) -> tuple[FileStamp | None, ...]:
    return tuple(file_stamp(path) for path in paths)


class _FollowedContext:
    """A context rebuilt by ``build`` when one of ``paths`` changes (checked at most
    every ``recheck`` seconds, when a connection asks)."""

    def __init__(self, build: Callable[[], ssl.SSLContext], paths: tuple[str, ...], *,
                 recheck: float, clock: Callable[[], float], what: str) -> None:
        self._build = build
        self._paths = paths
        self._what = what
        #: Seconds between two looks at the files.
        self.recheck = recheck
        self._clock = clock
        self._context = build()  # a bad file fails the start, naming its key
        self._stamp = _stamps(paths)
        self._checked = clock()
        #: How many times a changed file was loaded.
        self.reloads = 0

    def current(self) -> ssl.SSLContext:
        """The context for a new connection (a changed file is loaded first; a change
        that cannot be loaded is logged and the previous context kept)."""
        now = self._clock()
        if now - self._checked >= self.recheck:
            self._checked = now
            stamp = _stamps(self._paths)
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = self._build()
                except ConfigError as exc:
                    log.warning("%s TLS files changed but cannot be loaded, the previous "
                                "ones stay in use: %s", self._what, exc)
                else:
                    self.reloads += 1
                    log.info("%s TLS files reloaded (%s)", self._what, ", ".join(self._paths))
        return self._context


class ServerTlsContext(_FollowedContext):
    """A server's current context, rebuilt when its certificate, key or trust files
    change (checked at most every ``recheck`` seconds, when a connection asks)."""

    def __init__(self, settings: TlsServerSettings, *, recheck: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        super().__init__(settings.context, tuple(
            p for p in (settings.cert_path, settings.key_path, settings.trust_cert_path)
            if p), recheck=recheck, clock=clock, what="server")

    def handshake_context(self) -> ssl.SSLContext:
        """A context for a server that takes one when it starts: each handshake it begins
        moves to :meth:`current` (from the SNI callback, which OpenSSL calls on every
        handshake, with or without a server name), so such a server follows the files
        too; connections already open keep the context they started with."""
        context = self.settings.context()
        context.sni_callback = self._switch
        return context

    def _switch(self, connection: ssl.SSLObject, _server_name: str | None,
                _context: ssl.SSLContext) -> None:
        connection.context = self.current()


class ClientTlsContext(_FollowedContext):
    """A client's current context, rebuilt when its CA, certificate or key files change
    (checked at most every ``recheck`` seconds, when a connection is dialed): a renewed
    client certificate or a new CA file is used by the next connection, without a
    restart; open connections keep the context they started with."""

    def __init__(self, settings: TlsClientSettings, *, recheck: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not settings.enable:
            raise ValueError("a client TLS context needs tls.enable")
        self.settings = settings

        def build() -> ssl.SSLContext:
            context = settings.context()
            assert context is not None  # enabled
            return context

        super().__init__(build, tuple(
            p for p in (settings.trust_cert_path, settings.cert_path, settings.key_path)
            if p), recheck=recheck, clock=clock, what="client")


def describe_tls_failure(exc: BaseException) -> str:
    """Why a TLS connection failed, in words a user can act on."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        message = exc.verify_message or str(exc)
        low = message.lower()
        if "mismatch" in low:
            return f"the server's certificate does not name this host ({message})"
        if "expired" in low:
            return "the server's certificate has expired"
        if "not yet valid" in low:
            return "the server's certificate is not valid yet"
        if "self-signed" in low or "self signed" in low or "local issuer" in low:
            return (f"the server's certificate is not signed by a trusted CA ({message}); "
                    "set the CA file (tls.client.trustCertPath)")
        return f"the server's certificate was refused: {message}"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or str(exc)).upper()
        if "CERTIFICATE_REQUIRED" in reason:
            return "the server requires a client certificate (tls.client.certPath)"
        if "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason:
            return "the server refused our client certificate (not signed by a CA it trusts)"
        if "CERTIFICATE_EXPIRED" in reason:
            return "the server refused our client certificate: it has expired"
        if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER_FAILURE" in reason:
            return "the server does not speak TLS on this port (tls.server.mode=disabled?)"
        return f"TLS failed: {exc.reason or exc}"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, EOFError)) or (
            isinstance(exc, OSError) and not isinstance(exc, TimeoutError)):
        return ("the server closed the connection during the TLS handshake: it may not "
                "accept TLS on this port (tls.server.mode=disabled, or no certificate)")
    return f"TLS failed: {type(exc).__name__}: {exc}"

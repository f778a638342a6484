"""Bind addresses: which are loopback or wildcard, how this machine reaches a server
bound to one, what a broker bound to one advertises, and the warning when a server
without an ACL is reachable from other machines.

=================  =========================  ==============================
bind address       reached from this machine  advertised by a broker
=================  =========================  ==============================
127.0.0.1 (::1)    the same                   brokerIP1 if loopback, else an
                                              error (nobody could connect)
0.0.0.0 / ::       127.0.0.1 (::1)            brokerIP1, else this machine's
                                              address (:func:`machine_host`)
any other address  the same                   brokerIP1, else the bind address
=================  =========================  ==============================
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket

from tidemq.errors import ConfigError

__all__ = ["LOOPBACK", "advertised_host", "check_advertised", "is_loopback", "is_wildcard",
           "local_host", "machine_host", "warn_if_exposed"]

LOOPBACK = "127.0.0.1"
_WILDCARDS = {"0.0.0.0": LOOPBACK, "": LOOPBACK, "::": "::1"}


def is_wildcard(host: str) -> bool:
    """Whether binding ``host`` listens on every interface."""
    return host in _WILDCARDS


def is_loopback(host: str) -> bool:
    """Whether ``host`` accepts connections from this machine only (``localhost`` or a
    loopback literal); a name other than ``localhost`` counts as reachable."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_host(bind: str) -> str:
    """The host this machine connects to for a server bound to ``bind``."""
    return _WILDCARDS.get(bind, bind)


def machine_host() -> str:
    """This machine's address as other machines see it: the source address of its route
    outwards (a UDP socket's ``connect`` sends nothing), else its host name's address,
    else 127.0.0.1."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("198.51.100.1", 9))  # TEST-NET-2: a route lookup, never a packet
        host = str(s.getsockname()[0])
        if not is_wildcard(host) and not is_loopback(host):
            return host
    with contextlib.suppress(OSError):
        host = socket.gethostbyname(socket.gethostname())
        if not is_loopback(host):
            return host
    return LOOPBACK


def check_advertised(bind: str, broker_ip1: str) -> None:
    """Refuse a ``brokerIP1`` that nobody could connect to: a non-loopback address
    advertised by a broker that accepts loopback connections only."""
    if broker_ip1 and is_loopback(bind) and not is_loopback(broker_ip1):
        raise ConfigError(
            f"brokerIP1 {broker_ip1} is advertised, but bindAddress {bind} accepts "
            f"connections from this machine only; bind 0.0.0.0 or {broker_ip1} "
            "(--host), or leave brokerIP1 unset", key="brokerIP1")


def check_listen(bind: str, listen_port: int, metrics_port: int,
                 broker_ip1: str = "") -> None:
    """Refuse listening settings a server cannot start with: an empty ``bindAddress``, a
    ``brokerIP1`` nobody could connect to (:func:`check_advertised`), a port out of range."""
    if not bind:
        raise ConfigError("bindAddress must not be empty (0.0.0.0: every interface)",
                          key="bindAddress")
    check_advertised(bind, broker_ip1)
    for key, port in (("listenPort", listen_port), ("metricsPort", metrics_port)):
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key} {port} is not a port", key=key)


def advertised_host(bind: str, broker_ip1: str = "") -> str:
    """The host a broker bound to ``bind`` gives the name servers and clients (see the
    table at the top of this module)."""
    check_advertised(bind, broker_ip1)
    if broker_ip1:
        return broker_ip1
    if is_wildcard(bind):
        return machine_host()
    return bind


def warn_if_exposed(log: logging.Logger, server: str, host: str, *, acl: bool = False,
                    reach: str = "send, read and delete messages and topics") -> bool:
    """Log a warning when ``server`` bound to ``host`` can be reached from other machines
    and checks no ACL (``acl``: it does); whether it warned. ``reach``: what anyone who
    can connect is able to do."""
    if is_loopback(host) or acl:
        return False
    log.warning("%s listens on %s, reachable from other machines, with no ACL: anyone "
                "who can reach the port can %s; restrict it with a firewall, turn on "
                "aclEnable, or bind 127.0.0.1 (--host)", server, host or "0.0.0.0", reach)
    return True

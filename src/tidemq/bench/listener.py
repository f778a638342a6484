"""The process on this machine that listens on a TCP address: how a benchmark loading a
broker it did not start (``--namesrv``) finds the broker's process to read its CPU use.

:func:`listening_pid` asks psutil for the TCP sockets in LISTEN state on the address's
port -- bound to the address itself or to every address -- and the process holding one.
Where no process can be named it answers why, in words a benchmark prints instead of a
CPU figure: the address is not this machine's, nothing visible here listens on it
(another network namespace, a container), or the process holding the socket cannot be
inspected by this user.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

__all__ = ["listening_pid"]

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _bound_ip(text: str) -> _IP:
    """The address a socket is bound to, an IPv4-mapped IPv6 address as its IPv4 one."""
    ip = ipaddress.ip_address(text.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_local(ip: _IP) -> bool:
    """Whether ``ip`` is one of this machine's addresses (a socket can bind to it)."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((str(ip), 0))
        except OSError:
            return False
    return True


def listening_pid(address: str) -> int | str:
    """The pid of the process on this machine listening on ``address`` (``host:port``),
    or why there is none to name (module docstring)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        return f"{address!r} is not host:port"
    host = host.strip("[]")
    try:
        ip = _bound_ip(str(socket.getaddrinfo(host, None)[0][4][0]))
    except (OSError, ValueError) as exc:
        return f"{host} does not resolve: {exc}"
    if not _is_local(ip):
        return f"{address} is not an address of this machine"
    port = int(port_text)
    try:
        sockets = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return f"the sockets of this machine cannot be listed by this user ({address})"
    listeners = [s for s in sockets
                 if s.status == psutil.CONN_LISTEN and s.laddr and s.laddr.port == port
                 and (_bound_ip(s.laddr.ip) == ip or _bound_ip(s.laddr.ip).is_unspecified)]
    if not listeners:
        return f"no socket visible here listens on {address} (another network namespace?)"
    pid = next((s.pid for s in listeners if s.pid is not None), None)
    if pid is None:
        return f"the process listening on {address} cannot be inspected by this user"
    return pid

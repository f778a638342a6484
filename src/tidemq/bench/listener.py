"""The process on this machine that listens on a TCP address: how a benchmark loading a
broker it did not start (``--namesrv``) finds the broker's process to read its CPU use.

:func:`listening_pid` reads the kernel's socket tables (``/proc/net/tcp`` and
``/proc/net/tcp6``) for a socket in LISTEN state on the address's port -- bound to the
address itself or to every address -- and then the open files of each process
(``/proc/<pid>/fd``) for the one holding that socket. Where no process can be named it
answers why, in words a benchmark prints instead of a CPU figure: the address is not
this machine's, nothing visible here listens on it (another network namespace, a
container), or the process holding the socket cannot be inspected by this user.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket

__all__ = ["listening_pid"]

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
#: The ``st`` column of a listening socket.
_LISTEN = "0A"
_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _table_ip(hex_addr: str) -> _IP:
    """An address as the socket tables write it: 32-bit words in the host's byte order
    (little-endian on every machine this runs on)."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ipaddress.IPv4Address(words)
    ip6 = ipaddress.IPv6Address(words)
    return ip6.ipv4_mapped or ip6


def _listening_inodes(port: int) -> dict[int, _IP]:
    """The inodes of the sockets listening on ``port``, with the address each is bound
    to."""
    found: dict[int, _IP] = {}
    for table in _TABLES:
        try:
            with open(table, encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            addr, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port:
                found[int(fields[9])] = _table_ip(addr)
    return found


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


def _holder(inodes: set[int]) -> tuple[int | None, int]:
    """The process holding one of the sockets ``inodes``, and how many processes could
    not be inspected."""
    links = {f"socket:[{inode}]" for inode in inodes}
    hidden = 0
    with os.scandir("/proc") as entries:
        pids = [entry.name for entry in entries if entry.name.isdigit()]
    for pid in pids:
        try:
            with os.scandir(f"/proc/{pid}/fd") as fds:
                paths = [fd.path for fd in fds]
        except PermissionError:
            hidden += 1
            continue
        except OSError:  # the process ended
            continue
        for path in paths:
            with contextlib.suppress(OSError):
                if os.readlink(path) in links:
                    return int(pid), hidden
    return None, hidden


def listening_pid(address: str) -> int | str:
    """The pid of the process on this machine listening on ``address`` (``host:port``),
    or why there is none to name (module docstring)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        return f"{address!r} is not host:port"
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(socket.getaddrinfo(host, None)[0][4][0])
    except (OSError, ValueError) as exc:
        return f"{host} does not resolve: {exc}"
    if not _is_local(ip):
        return f"{address} is not an address of this machine"
    port = int(port_text)
    inodes = {inode for inode, bound in _listening_inodes(port).items()
              if bound == ip or bound.is_unspecified}
    if not inodes:
        return f"no socket visible here listens on {address} (another network namespace?)"
    pid, hidden = _holder(inodes)
    if pid is None:
        return (f"the process listening on {address} cannot be inspected by this user "
                f"({hidden} processes could not be read)")
    return pid

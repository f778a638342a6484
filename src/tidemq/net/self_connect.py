"""A TCP connection to itself: what a dial to a port nobody listens on can make.

When the port dialled lies in the kernel's ephemeral range and the kernel picks that same
port as the connection's own end, the two ends meet and the connection opens with no
server behind it: every request sent is read back as its own answer, and the port stays
taken, so the server meant to listen there cannot start. A dial that made one closes it
and fails as a refused one would.
"""

from __future__ import annotations

import socket
import struct

from tidemq.errors import ConnectFailed

__all__ = ["SELF_CONNECTED", "refuse_self_connection"]

SELF_CONNECTED = ("nothing listens there (the connection met itself: the port is in the "
                  "ephemeral range and was picked as its own end)")


def refuse_self_connection(sock: socket.socket | None, address: str) -> None:
    """Raise :class:`~tidemq.errors.ConnectFailed` when ``sock`` is connected to itself,
    set to be reset when the caller closes it."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    try:
        if sock.getsockname() == sock.getpeername():
            # closed with a reset, it leaves no TIME_WAIT holding the port
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            raise ConnectFailed(address, SELF_CONNECTED)
    except OSError:
        return  # no longer connected: the first read or write says so

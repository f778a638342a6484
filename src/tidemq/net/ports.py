"""Loopback ports to start a server on, for tools that start servers of their own
(``tidemq bench``, the tests).

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` comes from its ephemeral
range, the range it also takes the local ports of outgoing connections from: between the
moment such a port is found free and the moment the server binds it, any connection this
machine opens may take it. :func:`free_ports` therefore draws ports at random from below
that range (``/proc/sys/net/ipv4/ip_local_port_range``), which outgoing connections never
use, checks each by binding it, and binds the ``n`` together so they are distinct.
Where the range cannot be read it falls back to the kernel's choice.

Several processes that each start servers side by side (the test suite's parallel
workers, two benchmarks) can keep out of each other's way: with
``TIDEMQ_PORT_SLICE=k/n`` in the environment a process draws only from the ``k``-th of
``n`` equal slices of that range (``k`` counted from 0).

A process does not hand out a port again while it is among the last :data:`_RECENT` it
handed out: two calls made before the first port's server has bound it (a test that
picks an HA port, then starts a broker that picks its own) would otherwise be able to
get the same port.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import socket
import threading
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Lowest port drawn (below it live the well-known and registered services one may run).
_LOWEST = 10_000
_ATTEMPTS = 64
#: Ports handed out lately, not handed out again (oldest first).
_RECENT = 512
_handed: collections.deque[int] = collections.deque(maxlen=_RECENT)
_handed_lock = threading.Lock()


def _below_ephemeral() -> range:
    try:
        first = int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return range(0)
    return _slice(range(_LOWEST, first), os.environ.get("TIDEMQ_PORT_SLICE", ""))


def _slice(ports: range, spec: str) -> range:
    """The ``k``-th of ``n`` slices of ``ports`` for ``spec`` = ``"k/n"``; all of them
    for an empty spec. A malformed spec is refused, not ignored: two processes that
    meant to stay apart would otherwise collide."""
    if not spec:
        return ports
    k_text, _, n_text = spec.partition("/")
    try:
        k, n = int(k_text), int(n_text)
    except ValueError:
        k, n = -1, 0
    if not 0 <= k < n or n > len(ports):
        raise ValueError(f"TIDEMQ_PORT_SLICE={spec!r}: expected k/n with 0 <= k < n "
                         f"(n at most {len(ports)})")
    size = len(ports) // n
    return range(ports.start + k * size, ports.start + (k + 1) * size)


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that were free a moment ago."""
    draw = _below_ephemeral()
    rng = random.Random()
    with _handed_lock, contextlib.ExitStack() as stack:  # a thread's draws, then another's
        socks: list[socket.socket] = []
        misses = 0
        while len(socks) < n:
            sock = stack.enter_context(socket.socket())
            port = rng.choice(draw) if draw and misses < _ATTEMPTS else 0
            if port and port in _handed:  # handed out lately: its server may not bind yet
                misses += 1
                continue
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # taken: draw again
                misses += 1
                continue
            socks.append(sock)
        got = [int(s.getsockname()[1]) for s in socks]
        _handed.extend(got)
        return got


def free_port() -> int:
    """One loopback port that was free a moment ago."""
    return free_ports(1)[0]

"""Finding the process listening on an address: real sockets of this process, a port
nobody listens on, an address of another machine."""

from __future__ import annotations

import os
import socket

import pytest

from tidemq.bench.listener import listening_pid
from tidemq.net.ports import free_ports


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0"])
def test_a_socket_of_this_process_is_found(bind: str) -> None:
    with socket.socket() as s:
        s.bind((bind, 0))
        s.listen()
        port = s.getsockname()[1]
        assert listening_pid(f"127.0.0.1:{port}") == os.getpid()
        assert listening_pid(f"localhost:{port}") == os.getpid()


def test_an_ipv6_listener_is_found() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        s.listen()
        assert listening_pid(f"[::1]:{s.getsockname()[1]}") == os.getpid()


def test_a_connected_socket_is_not_a_listener() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            there = client.getsockname()
            why = listening_pid(f"127.0.0.1:{there[1]}")
    assert isinstance(why, str) and "no socket visible here listens on" in why


def test_nothing_listening_and_no_such_machine_are_said_plainly() -> None:
    (port,) = free_ports(1)
    why = listening_pid(f"127.0.0.1:{port}")
    assert isinstance(why, str) and f"listens on 127.0.0.1:{port}" in why
    why = listening_pid("192.0.2.1:10911")  # TEST-NET-1: never this machine's
    assert why == "192.0.2.1:10911 is not an address of this machine"
    assert listening_pid("no-port") == "'no-port' is not host:port"

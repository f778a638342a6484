"""map_exceptions / network_errors: foreign exceptions become TideMQ errors with fields."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tidemq.errors import ConnectFailed, ConnectionLost, RequestTimeout, StoreError
from tidemq.net import map_exceptions, network_errors
from tidemq.net.errors import dial_errors

ADDR = "10.1.2.3:10911"


@pytest.mark.parametrize(
    "foreign",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        BrokenPipeError(32, "Broken pipe"),
        ConnectionRefusedError(111, "Connection refused"),
        OSError(113, "No route to host"),
        asyncio.IncompleteReadError(b"ab", 10),
    ],
)
def test_connection_errors_become_connection_lost(foreign: BaseException) -> None:
    with pytest.raises(ConnectionLost) as info, map_exceptions(network_errors(ADDR)):
        raise foreign
    assert info.value.address == ADDR
    assert info.value.__cause__ is foreign
    assert type(foreign).__name__ in info.value.reason


def test_timeout_becomes_request_timeout_with_fields() -> None:
    mapping = network_errors(ADDR, code=11, opaque=42, timeout_ms=1500)
    foreign = TimeoutError()
    with pytest.raises(RequestTimeout) as info, map_exceptions(mapping):
        raise foreign
    error = info.value
    assert (error.address, error.code, error.opaque, error.timeout_ms) == (ADDR, 11, 42, 1500)
    assert error.__cause__ is foreign


def test_other_exceptions_pass_through() -> None:
    with pytest.raises(KeyError), map_exceptions(network_errors(ADDR)):
        raise KeyError("x")
    own = StoreError("disk full")
    with pytest.raises(StoreError) as info, map_exceptions({Exception: lambda e: own}):
        raise own
    assert info.value is own and info.value.__cause__ is None


def test_first_matching_entry_wins() -> None:
    mapping = {
        ConnectionResetError: lambda e: ConnectionLost("a", "specific"),
        OSError: lambda e: ConnectionLost("a", "generic"),
    }
    with pytest.raises(ConnectionLost) as info, map_exceptions(mapping):
        raise ConnectionResetError()
    assert info.value.reason == "specific"


def test_no_exception_no_effect() -> None:
    with map_exceptions(network_errors(ADDR)):
        value = 1
    assert value == 1


@pytest.mark.parametrize(("foreign", "says"), [
    (ConnectionRefusedError(111, "Connection refused"), "connection refused (nothing listens"),
    (socket.gaierror(-2, "Name or service not known"), "unknown host (Name or service not"),
    (TimeoutError(), "no answer within 3.0 s"),
    (OSError(113, "No route to host"), "OSError: [Errno 113] No route to host"),
])
def test_a_failed_dial_says_it_never_connected(foreign: BaseException, says: str) -> None:
    with pytest.raises(ConnectFailed) as info, map_exceptions(dial_errors(ADDR, 3.0)):
        raise foreign
    assert isinstance(info.value, ConnectionLost) and info.value.address == ADDR
    assert str(info.value).startswith(f"cannot connect to {ADDR}: {says}")

"""Bind addresses: loopback and wildcard checks, the advertised host, the warning."""

from __future__ import annotations

import logging

import pytest

from tidemq.errors import ConfigError
from tidemq.net.bind import (
    advertised_host,
    check_listen,
    is_loopback,
    is_wildcard,
    local_host,
    machine_host,
    warn_if_exposed,
)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost", "LOCALHOST"])
def test_loopback(host: str) -> None:
    assert is_loopback(host)
    assert not is_wildcard(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.7", "fe80::1", "broker-1"])
def test_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(("bind", "local"), [("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"),
                                             ("::", "::1"), ("127.0.0.2", "127.0.0.2"),
                                             ("192.0.2.7", "192.0.2.7")])
def test_local_host_reaches_the_bind(bind: str, local: str) -> None:
    assert local_host(bind) == local


def test_machine_host_is_an_address_of_this_machine_beyond_loopback_when_it_has_one() -> None:
    host = machine_host()
    assert not is_wildcard(host)
    assert host == "127.0.0.1" or not is_loopback(host)


@pytest.mark.parametrize(("bind", "ip1", "advertised"), [
    ("127.0.0.1", "", "127.0.0.1"),
    ("127.0.0.2", "", "127.0.0.2"),
    ("127.0.0.1", "127.0.0.1", "127.0.0.1"),
    ("192.0.2.7", "", "192.0.2.7"),
    ("192.0.2.7", "203.0.113.9", "203.0.113.9"),  # behind NAT: the outside address
    ("0.0.0.0", "203.0.113.9", "203.0.113.9"),
])
def test_advertised_host(bind: str, ip1: str, advertised: str) -> None:
    assert advertised_host(bind, ip1) == advertised


def test_a_wildcard_bind_advertises_this_machine() -> None:
    assert advertised_host("0.0.0.0") == machine_host()


def test_a_loopback_bind_cannot_advertise_an_outside_address() -> None:
    expected = r"brokerIP1 192\.0\.2\.9 .* bindAddress 127\.0\.0\.1"
    with pytest.raises(ConfigError, match=expected) as err:
        advertised_host("127.0.0.1", "192.0.2.9")
    assert err.value.key == "brokerIP1"


@pytest.mark.parametrize(("args", "key"), [
    (("", 0, 0), "bindAddress"),
    (("127.0.0.1", 0, 0, "203.0.113.9"), "brokerIP1"),
    (("127.0.0.1", 65536, 0), "listenPort"),
    (("127.0.0.1", -1, 0), "listenPort"),
    (("127.0.0.1", 0, 70000), "metricsPort"),
    (("", 70000, 70000), "bindAddress"),  # the first setting wrong is the one named
    (("127.0.0.1", 70000, 70000, "203.0.113.9"), "brokerIP1"),
])
def test_check_listen_names_the_setting_that_cannot_work(args: tuple[object, ...],
                                                         key: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_listen(*args)  # type: ignore[arg-type]
    assert err.value.key == key


def test_check_listen_takes_the_ends_of_the_port_range() -> None:
    check_listen("0.0.0.0", 0, 65535, "203.0.113.9")
    check_listen("::1", 65535, 0)


def test_warning_only_beyond_loopback(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.bind")
    with caplog.at_level(logging.WARNING, "test.bind"):
        assert not warn_if_exposed(log, "the thing", "127.0.0.1")
        assert caplog.records == []
        assert warn_if_exposed(log, "the thing", "0.0.0.0")
    [record] = caplog.records
    assert "the thing listens on 0.0.0.0" in record.getMessage()
    assert "no ACL" in record.getMessage()

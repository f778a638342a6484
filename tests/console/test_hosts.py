"""The Host allow-list: parsing Host headers and what a console bound where answers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.console.hosts import HostAllowList, host_name, is_loopback


@pytest.mark.parametrize(("header", "name"), [
    ("localhost:8080", "localhost"), ("LocalHost", "localhost"),
    ("console.example.", "console.example"),
    ("[::1]:8080", "::1"), ("[::1]", "::1"), ("127.0.0.1:80", "127.0.0.1"),
    ("", None), ("a b", None), ("[::1", None), ("[::1]x", None), ("[evil]:80", None),
    ("host:port", None), ("::1", None), ("user@host", None), ("h/x", None), (":80", None),
])
def test_host_name(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_a_loopback_console_answers_its_own_names_only() -> None:
    hosts = HostAllowList("127.0.0.1")
    for ok in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "[0:0:0:0:0:0:0:1]:1"):
        assert hosts.allows(ok), ok
    for bad in ("rebind.example:8080", "10.0.0.5:8080", "127.0.0.2", None, "", "x y"):
        assert not hosts.allows(bad), bad


def test_a_console_bound_to_an_address_answers_it_and_the_configured_names() -> None:
    hosts = HostAllowList("10.0.0.5", ["Console.Example.", " ops.example "])
    for ok in ("10.0.0.5:8080", "console.example", "OPS.example:443", "localhost"):
        assert hosts.allows(ok), ok
    assert not hosts.allows("10.0.0.6") and not hosts.allows("attacker.example")


def test_a_wildcard_console_answers_any_address_literal_but_no_other_name() -> None:
    hosts = HostAllowList("0.0.0.0")
    assert hosts.allows("192.0.2.7:8080") and hosts.allows("[2001:db8::1]:8080")
    assert not hosts.allows("rebind.example:8080")
    assert not HostAllowList("::").allows("evil.example")


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")


names = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){0,3}", fullmatch=True)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names, st.integers(0, 65535))
def test_only_listed_names_pass(name: str, port: int) -> None:
    assert HostAllowList("127.0.0.1", [name]).allows(f"{name}:{port}")
    allowed = name in ("localhost",)
    assert HostAllowList("0.0.0.0").allows(f"{name}:{port}") == allowed


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=40))
def test_any_header_is_decided_without_error(header: str) -> None:
    HostAllowList("0.0.0.0", ["a.example"]).allows(header)
    name = host_name(header)
    assert name is None or (name and name == name.lower())

"""Remoting addresses: "host:port" and "[v6]:port"."""

from __future__ import annotations

import pytest

from tidemq.errors import ConfigError
from tidemq.net import format_address, parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:10911", ("127.0.0.1", 10911)),
        ("broker-a.local:9876", ("broker-a.local", 9876)),
        ("[::1]:10911", ("::1", 10911)),
    ],
)
def test_parse(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "host", ":80", "host:", "host:x", "host:0", "host:70000"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_address(text)


def test_format() -> None:
    assert format_address(("127.0.0.1", 5000)) == "127.0.0.1:5000"
    assert format_address(("::1", 5000, 0, 0)) == "[::1]:5000"
    assert parse_address(format_address(("::1", 5000, 0, 0))) == ("::1", 5000)
    assert format_address(None) == "None"

"""The console's pure helpers: previews, logical-queue rows, forms."""

from __future__ import annotations

from tidemq.console.model import (
    body_preview,
    human_bytes,
    is_system_group,
    is_system_topic,
    parse_form,
    uptime,
    when,
)


def test_utf8_body_is_shown_as_text() -> None:
    p = body_preview("héllo\nworld".encode())
    assert (p.kind, p.text, p.size, p.truncated) == ("utf-8", "héllo\nworld", 12, False)


def test_binary_body_is_shown_as_hex_rows_of_16() -> None:
    p = body_preview(bytes(range(20)))
    assert p.kind == "hex"
    assert p.text.splitlines() == [bytes(range(16)).hex(" "), "10 11 12 13"]
    assert p.size == 20


def test_control_characters_make_it_hex() -> None:
    assert body_preview(b"abc\x00def").kind == "hex"


def test_long_body_is_cut_and_a_split_character_dropped() -> None:
    body = "é".encode() * 10  # 20 bytes
    p = body_preview(body, limit=5)  # cuts the third é in half
    assert (p.kind, p.text, p.truncated, p.size) == ("utf-8", "éé", True, 20)


def test_invalid_utf8_in_the_middle_is_hex_even_when_cut() -> None:
    p = body_preview(b"\xff" + b"a" * 10, limit=4)
    assert p.kind == "hex" and p.truncated and p.text == "ff 61 61 61"


def test_parse_form_decodes_and_strips() -> None:
    assert parse_form(b"topic=+Orders+&keys=a+b&empty=") == {
        "topic": "Orders", "keys": "a b", "empty": ""}


def test_system_names() -> None:
    assert is_system_topic("TBW102") and is_system_topic("%RETRY%g")
    assert is_system_topic("DefaultCluster", clusters=["DefaultCluster"])
    assert is_system_topic("broker-a", brokers=["broker-a"])
    assert not is_system_topic("Orders")
    assert is_system_group("TOOLS_CONSUMER") and not is_system_group("billing")


def test_formats() -> None:
    assert human_bytes(512) == "512 B" and human_bytes(3 * 1024 * 1024) == "3.0 MiB"
    assert when(0) == "-" and when("x") == "-" and when(1_700_000_000_000).startswith("20")
    assert uptime(None) == "-" and uptime("x") == "-"
    assert uptime(1000, now_ms=13_000) == "12s" and uptime(0 + 1, now_ms=7 * 60_000) == "6m"
    assert uptime(1, now_ms=(2 * 3600 + 5 * 60) * 1000 + 1) == "2h 5m"
    assert uptime(1, now_ms=(3 * 86400 + 4 * 3600) * 1000 + 1) == "3d 4h"

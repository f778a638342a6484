"""docs/configuration.md is what its generator writes from the code, every setting has a
description, and the page's tables say what the servers do: every key, the defaults a
broker shows (getBrokerConfig), the keys updateBrokerConfig / updateNamesrvConfig take."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tidemq.broker import runtime_config as broker_runtime
from tidemq.broker.config import BrokerConfig
from tidemq.cli import config_reference
from tidemq.cli.config_reference import CONFIGS, SECTIONS, main, missing_descriptions, render
from tidemq.errors import ConfigError
from tidemq.formats.javaprops import config_keys, describe, primary_keys
from tidemq.namesrv import runtime_config as namesrv_runtime
from tidemq.namesrv.config import NamesrvConfig
from tidemq.store.config import StoreConfig

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+(?:\\\|[^|]+)*) \| ([^|]+) \| (yes|no) \|",
                  re.MULTILINE)


def _part(page: str, name: str) -> str:
    start = page.index(f"<!-- generated: {name} -->")
    return page[start:page.index(f"<!-- end generated: {name} -->", start)]


def _rows(part: str) -> dict[str, tuple[str, bool]]:
    """Key -> (default as shown, can change at run time), of one generated table."""
    return {m.group(1): (m.group(3).strip(), m.group(4) == "yes") for m in _ROW.finditer(part)}


def test_the_page_is_what_the_generator_writes() -> None:
    page = PAGE.read_text("utf-8")
    assert render(page) == page, (
        "docs/configuration.md is out of date: run python -m tidemq.cli.config_reference")


def test_every_setting_has_a_description() -> None:
    assert missing_descriptions() == []


def test_a_setting_without_a_description_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    real = config_reference.field_docs
    monkeypatch.setattr(config_reference, "field_docs",
                        lambda cls: {**real(cls), "listen_port": ""})
    missing = missing_descriptions()
    assert "BrokerConfig.listen_port" in missing
    assert "NamesrvConfig.listen_port" in missing
    assert main(["--check", str(PAGE)]) == 1


def test_every_key_of_every_server_is_in_the_page() -> None:
    listed = {m.group(1) for m in _ROW.finditer(PAGE.read_text("utf-8"))}
    for cls in CONFIGS:
        missing = sorted(set(primary_keys(cls)) - listed)
        assert not missing, f"{cls.__name__}: {missing}"


def test_the_defaults_are_what_a_broker_shows() -> None:
    shown = broker_runtime.config_properties(BrokerConfig(), StoreConfig())
    page = PAGE.read_text("utf-8")
    rows = {**_rows(_part(page, "shared")), **_rows(_part(page, "store")),
            **_rows(_part(page, "broker"))}
    assert set(rows) == set(shown)
    for key, value in shown.items():
        expected = f"`{value}`" if value else "(empty)"
        assert rows[key][0] == expected, key


def test_the_defaults_are_what_a_name_server_shows() -> None:
    shown = describe(NamesrvConfig, NamesrvConfig())
    page = PAGE.read_text("utf-8")
    rows = {**_rows(_part(page, "shared")), **_rows(_part(page, "namesrv"))}
    assert set(rows) == set(shown)
    for key, value in shown.items():
        assert rows[key][0] == (f"`{value}`" if value else "(empty)"), key


def test_the_run_time_column_is_what_the_servers_take() -> None:
    page = PAGE.read_text("utf-8")
    broker = {**_rows(_part(page, "broker")), **_rows(_part(page, "store"))}
    assert {k for k, (_, runtime) in broker.items() if runtime} == set(
        broker_runtime.RUNTIME_KEYS)
    namesrv = _rows(_part(page, "namesrv"))
    assert {k for k, (_, runtime) in namesrv.items() if runtime} == set(
        namesrv_runtime.RUNTIME_KEYS)
    for name in ("shared", "controller", "console"):
        assert not any(runtime for _, runtime in _rows(_part(page, name)).values()), name


def test_a_stale_table_is_written_afresh_and_the_rest_kept(tmp_path: Path) -> None:
    page = PAGE.read_text("utf-8")
    stale = page.replace("| `brokerName` | string | `broker-a` |",
                         "| `brokerName` | string | `broker-z` |")
    assert stale != page
    copy = tmp_path / "configuration.md"
    copy.write_text(stale + "\nA hand-written last line.\n", "utf-8")
    assert main(["--check", str(copy)]) == 1
    assert main([str(copy)]) == 0
    assert copy.read_text("utf-8") == page + "\nA hand-written last line.\n"
    assert main(["--check", str(copy)]) == 0


def test_a_page_missing_a_part_or_naming_an_unknown_one_is_refused() -> None:
    page = PAGE.read_text("utf-8")
    without = page.replace("<!-- generated: console -->\n", "")
    with pytest.raises(ConfigError, match="console"):
        render(without)
    unknown = page + "\n<!-- generated: nothing -->\n<!-- end generated: nothing -->\n"
    with pytest.raises(ConfigError, match="nothing"):
        render(unknown)
    assert set(SECTIONS) <= set(re.findall(r"<!-- generated: ([\w-]+) -->", page))


def test_the_module_checks_the_page() -> None:
    done = subprocess.run([sys.executable, "-m", "tidemq.cli.config_reference", "--check",
                           str(PAGE)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr


def test_the_keys_the_page_calls_tidemqs_own_are_keys_of_tidemq() -> None:
    page = PAGE.read_text("utf-8")
    start = page.index("- **TideMQ's own keys.**")
    bullet = page[start:page.index("\n- ", start + 1)]
    named = re.findall(r"`([\w.]+)`", bullet)
    known = {key for cls in CONFIGS for key in config_keys(cls)}
    assert named
    assert [k for k in named if k not in known] == []

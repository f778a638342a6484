"""A name server keeps what UPDATE_NAMESRV_CONFIG changed across a SIGKILL and a restart,
in ``runtimeOverrides.properties`` beside its KV config; ``--set`` still wins, and a file
that does not read stops the start naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.cli.server_process import ServerProcess
from typer.testing import CliRunner

from tidemq.cli.main import app
from tidemq.errors import ConfigError
from tidemq.namesrv.config import load_namesrv_config
from tidemq.namesrv.config_overrides import overrides_path, read_overrides, write_overrides


def _admin(ns: ServerProcess, *args: str) -> dict[str, str]:
    result = CliRunner().invoke(app, ["admin", *args, "-n", ns.addr, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if result.stdout.strip() else {}


def test_a_run_time_change_survives_a_kill_and_a_restart(tmp_path: Path) -> None:
    kv = tmp_path / "namesrv" / "kvConfig.json"
    server = ServerProcess("namesrv", {"kvConfigPath": str(kv),
                                       "enableAllTopicList": "true"}).start()
    try:
        _admin(server, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
        _admin(server, "updateNamesrvConfig", "-k", "enableAllTopicList", "-v", "false")
        server.kill9()
        server.start()
        shown = _admin(server, "getNamesrvConfig")[server.addr]
        assert shown["orderMessageEnable"] == "true"
        # given again with --set at the start: the command line wins over the kept change
        assert shown["enableAllTopicList"] == "true"
        assert read_overrides(kv.parent / "runtimeOverrides.properties") == {
            "enableAllTopicList": "false", "orderMessageEnable": "true"}
    finally:
        server.stop()


def test_without_kv_config_path_nothing_is_kept(tmp_path: Path) -> None:
    assert overrides_path("") is None
    config, _ = load_namesrv_config(overrides={"listenPort": 0}, env={})
    assert config.order_message_enable is False


@pytest.mark.parametrize(("text", "key"), [
    (b"orderMessageEnable=maybe\n", "orderMessageEnable"),
    (b"noSuchKey=1\n", "noSuchKey"),
    (b"orderMessageEnable=\xff\n", "kvConfigPath"),
])
def test_a_file_that_does_not_read_names_itself_and_the_key(tmp_path: Path, text: bytes,
                                                           key: str) -> None:
    kv = tmp_path / "kvConfig.json"
    kept = tmp_path / "runtimeOverrides.properties"
    kept.write_bytes(text)
    with pytest.raises(ConfigError) as err:
        load_namesrv_config(overrides={"kvConfigPath": str(kv), "listenPort": 0}, env={})
    assert str(kept) in str(err.value)
    assert err.value.key == key


def test_the_environment_wins_over_the_kept_change(tmp_path: Path) -> None:
    kv = tmp_path / "kvConfig.json"
    write_overrides(tmp_path / "runtimeOverrides.properties",
                    {"orderMessageEnable": "true", "enableAllTopicList": "false"})
    config, _ = load_namesrv_config(overrides={"kvConfigPath": str(kv), "listenPort": 0},
                                    env={"TIDEMQ_ENABLEALLTOPICLIST": "true"})
    assert (config.order_message_enable, config.enable_all_topic_list) == (True, True)


_keys = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FFF,
                              blacklist_characters="=:#!\\"), min_size=1, max_size=12)


@settings(deadline=None)  # each example writes and renames files: slow on a busy disk
@given(st.lists(st.dictionaries(_keys, st.text(max_size=20), max_size=5), max_size=4))
def test_writes_merge_and_read_back(tmp_path_factory: pytest.TempPathFactory,
                                    updates: list[dict[str, str]]) -> None:
    path = tmp_path_factory.mktemp("kept") / "runtimeOverrides.properties"
    expected: dict[str, str] = {}
    for update in updates:
        expected.update(update)
        assert write_overrides(path, update) == expected
    assert read_overrides(path) == expected


def test_a_change_that_cannot_be_kept_is_not_made(tmp_path: Path) -> None:
    kv = tmp_path / "namesrv" / "kvConfig.json"
    kv.parent.mkdir()
    server = ServerProcess("namesrv", {"kvConfigPath": str(kv)}).start()
    try:
        (kv.parent / "runtimeOverrides.properties").mkdir()  # cannot be written as a file
        result = CliRunner().invoke(app, ["admin", "updateNamesrvConfig", "-k",
                                          "orderMessageEnable", "-v", "true", "-n",
                                          server.addr])
        assert result.exit_code == 1
        assert "SYSTEM_ERROR" in result.output
        assert "could not be kept in runtimeOverrides.properties" in result.output
        shown = _admin(server, "getNamesrvConfig")[server.addr]
        assert shown["orderMessageEnable"] == "false"
    finally:
        server.stop()

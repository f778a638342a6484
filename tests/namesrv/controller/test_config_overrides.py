"""A controller keeps what UPDATE_CONTROLLER_CONFIG changed across a SIGKILL and a
restart, in ``runtimeOverrides.properties`` in its store directory; ``--set`` still wins,
and a file that does not read stops the start naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.namesrv.controller.processes import ControllerProcess
from typer.testing import CliRunner

from tidemq.cli.main import app
from tidemq.errors import ConfigError
from tidemq.namesrv.controller.config import load_controller_config
from tidemq.namesrv.controller.config_overrides import (
    overrides_path,
    read_overrides,
    write_overrides,
)
from tidemq.net.ports import free_port


def _admin(addr: str, *args: str) -> dict[str, str]:
    result = CliRunner().invoke(app, ["admin", *args, "-a", addr, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if result.stdout.strip() else {}


def _one(home: Path, settings: dict[str, str], command: str = "controller",
         ) -> ControllerProcess:
    return ControllerProcess("n0", f"n0-127.0.0.1:{free_port()}", free_port(), settings,
                             home, command)


@pytest.mark.parametrize("command", ["controller", "namesrv"])
def test_a_run_time_change_survives_a_kill_and_a_restart(tmp_path: Path,
                                                         command: str) -> None:
    settings = {"controllerScanInterval": "400"}  # given again at each start: it wins
    if command == "namesrv":  # embedded: the store directory is beside the KV config
        settings["kvConfigPath"] = str(tmp_path / "namesrv" / "kvConfig.json")
        kept = tmp_path / "namesrv" / "controller" / "n0" / "runtimeOverrides.properties"
    else:
        settings["controllerStorePath"] = str(tmp_path / "raft")
        kept = tmp_path / "raft" / "runtimeOverrides.properties"
    server = _one(tmp_path, settings, command).start()
    try:
        _admin(server.addr, "updateControllerConfig", "-k", "enableElectUncleanMaster",
               "-v", "true")
        _admin(server.addr, "updateControllerConfig", "-k",
               "controllerBrokerHeartbeatTimeout", "-v", "7000")
        _admin(server.addr, "updateControllerConfig", "-k", "controllerScanInterval",
               "-v", "900")
        server.kill9()
        server.start()
        shown = _admin(server.addr, "getControllerConfig")[server.addr]
        assert shown["enableElectUncleanMaster"] == "true"
        assert shown["controllerBrokerHeartbeatTimeout"] == "7000"
        assert shown["controllerScanInterval"] == "400"  # --set wins over the kept change
        assert read_overrides(kept) == {"controllerBrokerHeartbeatTimeout": "7000",
                                        "controllerScanInterval": "900",
                                        "enableElectUncleanMaster": "true"}
    finally:
        server.kill9()


def _peers() -> dict[str, str]:
    return {"controllerRaftPeers": "n0-127.0.0.1:1", "controllerRaftSelfId": "n0"}


def test_a_controller_that_keeps_its_log_in_memory_keeps_no_changes(tmp_path: Path) -> None:
    assert overrides_path(None) is None
    config, _ = load_controller_config(
        overrides={**_peers(), "controllerStorePath": "memory"}, env={})
    assert config.enable_elect_unclean_master is False


@pytest.mark.parametrize(("text", "key"), [
    (b"enableElectUncleanMaster=maybe\n", "enableElectUncleanMaster"),
    (b"noSuchKey=1\n", "noSuchKey"),
    (b"enableElectUncleanMaster=\xff\n", "controllerStorePath"),
    (b"# Controller keys changed at run time (updateControllerConfig), written by the "
     b"controller; its last line is '# end'.\nenableElectUncleanMaster=true\n",
     "controllerStorePath"),
])
def test_a_file_that_does_not_read_names_itself_and_the_key(tmp_path: Path, text: bytes,
                                                           key: str) -> None:
    kept = tmp_path / "runtimeOverrides.properties"
    kept.write_bytes(text)
    with pytest.raises(ConfigError) as err:
        load_controller_config(overrides={**_peers(), "controllerStorePath": str(tmp_path)},
                               env={})
    assert str(kept) in str(err.value)
    assert err.value.key == key


def test_the_environment_wins_over_the_kept_change(tmp_path: Path) -> None:
    write_overrides(tmp_path / "runtimeOverrides.properties",
                    {"enableElectUncleanMaster": "true", "controllerScanInterval": "900"})
    config, _ = load_controller_config(
        overrides={**_peers(), "controllerStorePath": str(tmp_path)},
        env={"TIDEMQ_CONTROLLERSCANINTERVAL": "300"})
    assert (config.enable_elect_unclean_master, config.controller_scan_interval) == (
        True, 300)


def test_an_embedded_controller_reads_beside_the_name_servers_files(tmp_path: Path) -> None:
    write_overrides(tmp_path / "controller" / "n0" / "runtimeOverrides.properties",
                    {"enableElectUncleanMaster": "true"})
    config, _ = load_controller_config(overrides=_peers(), env={}, beside=tmp_path)
    assert config.enable_elect_unclean_master is True


def test_a_kept_file_naming_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runtimeOverrides.properties"
    write_overrides(path, {"controllerScanInterval": "900",
                           "scanNotActiveBrokerInterval": "300"})
    with pytest.raises(ConfigError) as err:
        load_controller_config(overrides={**_peers(), "controllerStorePath": str(tmp_path)},
                               env={})
    assert str(path) in str(err.value) and "scanNotActiveBrokerInterval" in str(err.value)
    assert err.value.key == "controllerScanInterval"


def test_a_change_under_an_alias_is_kept_under_its_key(tmp_path: Path) -> None:
    """The newest change of a key wins at the next start whichever name each change
    gave it: the file holds it once, under the key the controller shows."""
    settings = {"controllerStorePath": str(tmp_path / "raft")}
    kept = tmp_path / "raft" / "runtimeOverrides.properties"
    server = _one(tmp_path, settings).start()
    try:
        _admin(server.addr, "updateControllerConfig", "-k", "controllerScanInterval",
               "-v", "900")
        _admin(server.addr, "updateControllerConfig", "-k", "scanNotActiveBrokerInterval",
               "-v", "300")
        assert read_overrides(kept) == {"controllerScanInterval": "300"}
        server.kill9()
        server.start()
        shown = _admin(server.addr, "getControllerConfig")[server.addr]
        assert shown["controllerScanInterval"] == "300"
    finally:
        server.kill9()

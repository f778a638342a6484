"""A controller's Raft log on disk by default: a standalone controller keeps it under
``HOME``, one inside a name server beside the name server's files; a directory already
held by a running controller stops the second at start, before it serves anything."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from tests.crash.broker_process import free_port

from tidemq.errors import ConfigError
from tidemq.namesrv import NameServerApp
from tidemq.namesrv.config import NamesrvConfig
from tidemq.namesrv.controller import ControllerApp, ControllerConfig


def _config(**changes: object) -> ControllerConfig:
    return ControllerConfig(listen_port=0, controller_raft_self_id="n0",
                            controller_raft_peers=f"n0-127.0.0.1:{free_port()}").replace(
                                **changes)


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


async def test_without_a_store_path_the_log_is_kept_under_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    async with ControllerApp(_config()) as app:
        assert app.store_path == tmp_path / "tidemq" / "controller" / "n0"
        assert (app.store_path / "raft.journal").is_file()


async def test_inside_a_name_server_the_log_is_kept_beside_its_files(tmp_path: Path) -> None:
    controller = ControllerApp(_config(enable_controller_in_namesrv=True))
    kv = tmp_path / "ns" / "kvConfig.json"
    namesrv = NameServerApp(NamesrvConfig(listen_port=0, kv_config_path=str(kv)),
                            controller=controller)
    async with namesrv:
        assert controller.store_path == tmp_path / "ns" / "controller" / "n0"
        assert (controller.store_path / "raft.journal").is_file()


async def test_a_second_controller_on_a_held_directory_stops_before_serving(
        tmp_path: Path) -> None:
    store = str(tmp_path / "raft")
    async with ControllerApp(_config(controller_store_path=store)) as first:
        port = free_port()
        second = ControllerApp(_config(controller_store_path=store, listen_port=port))
        with pytest.raises(ConfigError, match="in use by another running controller") as info:
            await second.start()
        assert info.value.key == "controllerStorePath"
        assert second.server is None and second.raft is None and _refused(port)
        assert first.store_path == tmp_path / "raft"


async def test_a_name_server_whose_controller_cannot_lock_closes_its_port(
        tmp_path: Path) -> None:
    store = str(tmp_path / "raft")
    async with ControllerApp(_config(controller_store_path=store)):
        port = free_port()
        namesrv = NameServerApp(
            NamesrvConfig(listen_port=port),
            controller=ControllerApp(_config(controller_store_path=store,
                                             enable_controller_in_namesrv=True)))
        with pytest.raises(ConfigError) as info:
            await namesrv.start()
        assert info.value.key == "controllerStorePath"
        assert _refused(port)

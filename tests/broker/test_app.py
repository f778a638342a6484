"""BrokerApp's lifecycle over real TCP: a starting broker accepts no connection before it
can answer every request it serves."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.broker import wire
from tests.broker.held_recovery import recovery_held
from tests.broker.wire import Peer

from tidemq.broker.app import BrokerApp
from tidemq.broker.config import BrokerConfig
from tidemq.errors import ConnectionLost
from tidemq.store.config import StoreConfig


async def test_a_starting_broker_refuses_connections_until_it_is_ready(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = BrokerApp(BrokerConfig(listen_port=0, namesrv_addr=""),
                    StoreConfig(store_path_root_dir=str(tmp_path),
                                mapped_file_size_commit_log=16 * 1024 * 1024))
    try:
        async with recovery_held(app, monkeypatch) as release:  # a long recovery
            async with Peer(f"127.0.0.1:{app.server.port}") as early:
                with pytest.raises(ConnectionLost):
                    await early(wire.send("Early"), timeout=5)
            await release()
            async with Peer(app.broker_addr) as ready:
                await ready.ok(wire.create_topic("Early", 1))
                await ready.ok(wire.send("Early"))
    finally:
        await app.stop()

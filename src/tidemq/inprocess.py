"""In-process clusters for tests, examples and benchmarks: a name server and brokers on
port 0 with their stores under one directory, all on the running event loop.

Test code imports it as :class:`tidemq.testing.Cluster`; product code (``tidemq bench``)
imports it from here, since nothing shipped may depend on test support.

::

    async with Cluster(tmp_path, brokers=2) as cluster:
        producer = Producer("pg", cluster.namesrv_addr)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tidemq.broker.app import BrokerApp
from tidemq.broker.config import BrokerConfig
from tidemq.broker.replication.role import BrokerRole
from tidemq.namesrv import NameServerApp, NamesrvConfig
from tidemq.store.config import StoreConfig

__all__ = ["Cluster"]

#: Small segments keep the directories small; still far above one message.
SMALL_SEGMENT = 16 * 1024 * 1024


class Cluster:
    def __init__(self, root: Path, *, brokers: int = 1, cluster_name: str = "DefaultCluster",
                 broker: dict[str, Any] | None = None, store: dict[str, Any] | None = None,
                 namesrv: dict[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.broker_count = brokers
        self.cluster_name = cluster_name
        self.broker_overrides = broker or {}
        self.store_overrides = {"mapped_file_size_commit_log": SMALL_SEGMENT,
                                "mapped_file_size_consume_queue": 60_000, **(store or {})}
        self.namesrv_overrides = namesrv or {}
        self.namesrv: NameServerApp | None = None
        self.brokers: list[BrokerApp] = []

    @property
    def namesrv_addr(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    def broker_config(self, index: int) -> tuple[BrokerConfig, StoreConfig]:
        name = f"broker-{chr(ord('a') + index)}"
        bc = BrokerConfig(broker_name=name, broker_cluster_name=self.cluster_name,
                          listen_port=0, namesrv_addr=self.namesrv_addr,
                          **self.broker_overrides)
        sc = StoreConfig(store_path_root_dir=str(self.root / name), **self.store_overrides)
        return bc, sc

    async def start(self) -> Cluster:
        self.namesrv = NameServerApp(NamesrvConfig(listen_port=0, bind_address="127.0.0.1",
                                                   **self.namesrv_overrides))
        await self.namesrv.start()
        for i in range(self.broker_count):
            await self.add_broker(i)
        return self

    async def add_broker(self, index: int | None = None, **changes: Any) -> BrokerApp:
        index = len(self.brokers) if index is None else index
        bc, sc = self.broker_config(index)
        if changes:
            bc = dataclasses.replace(bc, **changes)
        app = BrokerApp(bc, sc)
        await app.start()
        self.brokers.append(app)
        return app

    async def add_replica(self, master: BrokerApp, broker_id: int = 1, *,
                          store: Mapping[str, Any] | None = None, **changes: Any) -> BrokerApp:
        """A replica (brokerRole SLAVE) of ``master``'s group, with its own store (the
        master's store settings, with ``store``'s changes); it is appended to
        :attr:`brokers`."""
        bc = dataclasses.replace(master.config, broker_role=BrokerRole.SLAVE,
                                 broker_id=broker_id, listen_port=0, ha_listen_port=0,
                                 ha_master_address=master.ctx.replication.ha_address,
                                 **changes)
        sc = dataclasses.replace(master.store_config, store_path_root_dir=str(
            self.root / f"{bc.broker_name}-{broker_id}"), **(store or {}))
        app = BrokerApp(bc, sc)
        await app.start()
        self.brokers.append(app)
        return app

    async def restart_broker(self, index: int) -> BrokerApp:
        old = self.brokers[index]
        await old.stop()
        app = BrokerApp(old.config, old.store_config)
        await app.start()
        self.brokers[index] = app
        return app

    async def stop(self) -> None:
        for app in self.brokers:
            await app.stop()
        self.brokers.clear()
        if self.namesrv is not None:
            await self.namesrv.stop()
            self.namesrv = None

    async def __aenter__(self) -> Cluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

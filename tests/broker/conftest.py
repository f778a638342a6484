"""Broker tests run against the integration cluster (tests/integration/conftest.py);
the parts that take a store alone get one of their own."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.broker.held import Held
from tests.integration.conftest import cluster, namesrv, peer

from tidemq.store.config import StoreConfig
from tidemq.store.message_store import MessageStore

__all__ = ["cluster", "namesrv", "peer"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    """A started store of 64 KiB commit-log segments, for the parts that take a store."""
    s = MessageStore(StoreConfig(store_path_root_dir=str(tmp_path),
                                 mapped_file_size_commit_log=64 * 1024))
    s.start()
    try:
        yield s
    finally:
        s.shutdown()


@pytest.fixture
def held() -> Iterator[Held]:
    """A slow step the test holds; let go at the end whatever happened."""
    h = Held()
    yield h
    h.release.set()

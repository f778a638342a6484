"""The client's largest frame (``max_frame_size``): from its config, the environment
(``TIDEMQ_MAX_FRAME_SIZE``) or RocketMQ's 16 MiB; an answer over it fails its request
with the sizes, and a client that allows it reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.config import MAX_FRAME_SIZE_ENV
from tidemq.client.monitor import committed_groups
from tidemq.codec.frame import DEFAULT_MAX_FRAME_SIZE
from tidemq.errors import ConfigError, TideMQError
from tidemq.inprocess import Cluster

LIMIT = 64 * 1024 * 1024


def test_the_limit_comes_from_the_config_the_environment_or_the_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_FRAME_SIZE_ENV, raising=False)
    assert ClientConfig(client_ip="127.0.0.1").frame_limit == DEFAULT_MAX_FRAME_SIZE
    monkeypatch.setenv(MAX_FRAME_SIZE_ENV, str(LIMIT))
    assert ClientConfig(client_ip="127.0.0.1").frame_limit == LIMIT
    assert ClientConfig(client_ip="127.0.0.1", max_frame_size=2048).frame_limit == 2048


def test_a_limit_that_is_not_one_is_refused_naming_its_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="under 1024 bytes") as small:
        ClientConfig(client_ip="127.0.0.1", max_frame_size=10)
    assert small.value.key == "max_frame_size"
    monkeypatch.setenv(MAX_FRAME_SIZE_ENV, "16MB")
    with pytest.raises(ConfigError, match="not a number of bytes") as text:
        ClientConfig(client_ip="127.0.0.1")
    assert text.value.key == MAX_FRAME_SIZE_ENV


async def test_offsets_over_16_mib_reach_a_client_that_allows_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_FRAME_SIZE_ENV, raising=False)
    async with Cluster(tmp_path, broker={"max_frame_size": LIMIT}) as cluster:
        cluster.brokers[0].ctx.offsets.table = {
            f"T{t:03d}@G{g:04d}": dict.fromkeys(range(8), 1_000_000 + g)
            for t in range(100) for g in range(1_700)}
        plain = ClientConfig(namesrv_addr=cluster.namesrv_addr, request_timeout=30.0)
        async with AdminClient(config=plain) as admin:
            with pytest.raises(TideMQError, match=f"maximum of {DEFAULT_MAX_FRAME_SIZE}"):
                await committed_groups(admin)
        large = ClientConfig(namesrv_addr=cluster.namesrv_addr, request_timeout=30.0,
                             max_frame_size=LIMIT)
        async with AdminClient(config=large) as admin:
            groups = await committed_groups(admin)
        assert len(groups) == 1_700 and len(groups["G0000"]) == 100

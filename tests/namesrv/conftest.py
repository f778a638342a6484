"""Fixtures for name-server tests: an app on 127.0.0.1 port 0 with a hand-moved clock,
a RemotingClient as the peer, and builders for REGISTER_BROKER requests."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Mapping

import pytest

from tidemq.codec.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    encode_register_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import RegisterBrokerRequestHeader
from tidemq.namesrv import NameServerApp, NamesrvConfig, RemovedBroker
from tidemq.net import RemotingClient

CLUSTER = "DefaultCluster"
START_MS = 1_000_000


class FakeClock:
    """Milliseconds the test moves by hand."""

    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def topic(name: str, queues: int = 4, perm: int = 6, sys_flag: int = 0) -> TopicConfig:
    return TopicConfig(topic_name=name, read_queue_nums=queues, write_queue_nums=queues,
                       perm=perm, topic_sys_flag=sys_flag)


def register_body(topics: Mapping[str, TopicConfig], counter: int = 1,
                  state: int = 0) -> RegisterBrokerBody:
    """``state``: the DataVersion's stateVersion (a controller-mode broker's epoch)."""
    wrapper = TopicConfigSerializeWrapper(
        topic_config_table=dict(topics),
        data_version=DataVersion(timestamp=1_726_700_000_000, counter=counter,
                                 state_version=state),
    )
    return RegisterBrokerBody(topic_config_serialize_wrapper=wrapper)


def register_header(name: str, addr: str, *, broker_id: int = 0, cluster: str = CLUSTER,
                    **extra: object) -> RegisterBrokerRequestHeader:
    values: dict[str, object] = {
        "broker_name": name, "broker_addr": addr, "cluster_name": cluster,
        "ha_server_addr": addr.rsplit(":", 1)[0] + ":10912", "broker_id": broker_id,
    }
    values.update(extra)
    return RegisterBrokerRequestHeader(**values)  # type: ignore[arg-type]


def register_request(
    name: str, addr: str, topics: Mapping[str, TopicConfig], *, broker_id: int = 0,
    cluster: str = CLUSTER, compressed: bool = False, counter: int = 1, crc: bool = True,
    state: int = 0, **extra: object,
) -> RemotingCommand:
    """A REGISTER_BROKER as a Java broker sends it (bodyCrc32 set unless ``crc`` is off)."""
    body = encode_register_body(register_body(topics, counter, state), compressed=compressed)
    header = register_header(name, addr, broker_id=broker_id, cluster=cluster,
                             compressed=compressed,
                             body_crc32=zlib.crc32(body) & 0x7FFFFFFF if crc else 0, **extra)
    cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)
    cmd.language = "JAVA"
    return cmd


def route_request(topic_name: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic_name})


class Removals:
    """Collects the app's removal events in order; tests await the next one."""

    def __init__(self) -> None:
        self.events: list[list[RemovedBroker]] = []
        self._queue: asyncio.Queue[list[RemovedBroker]] = asyncio.Queue()

    def __call__(self, removed: list[RemovedBroker]) -> None:
        self.events.append(removed)
        self._queue.put_nowait(removed)

    async def next(self, timeout: float = 5.0) -> list[RemovedBroker]:
        return await asyncio.wait_for(self._queue.get(), timeout)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def config() -> NamesrvConfig:
    return NamesrvConfig(listen_port=0, bind_address="127.0.0.1")


@pytest.fixture
async def app(config: NamesrvConfig, clock: FakeClock) -> AsyncIterator[NameServerApp]:
    server = NameServerApp(config, clock=clock)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def removals(app: NameServerApp) -> Removals:
    collector = Removals()
    app.on_brokers_removed(collector)
    return collector


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    async with RemotingClient(request_timeout=5.0) as peer:
        yield peer

"""ClientConfig and ClientInstance: sharing, heartbeats, unregistering, periodic refresh."""

from __future__ import annotations

import dataclasses
import os

import pytest
from tests.client.fakes import FakeBroker, FakeNameServer

from tidemq.client import ClientConfig, ClientInstance, Producer, PullConsumer
from tidemq.client.config import parse_namesrv
from tidemq.codec.command import RequestCode
from tidemq.codec.headers import UnregisterClientRequestHeader
from tidemq.errors import ConfigError
from tidemq.types import Message


def test_config_parsing_and_defaults() -> None:
    assert parse_namesrv("a:1; b:2,c:3") == ("a:1", "b:2", "c:3")
    cfg = ClientConfig(namesrv_addr="127.0.0.1:9876;127.0.0.2:9876")  # type: ignore[arg-type]
    assert cfg.namesrv_addr == ("127.0.0.1:9876", "127.0.0.2:9876")
    assert (cfg.request_timeout, cfg.retry_times_when_send_failed) == (3.0, 2)
    assert (cfg.compress_msg_body_over_howmuch, cfg.max_message_size) == (4096, 4 << 20)
    assert (cfg.poll_name_server_interval, cfg.heartbeat_broker_interval) == (30.0, 30.0)
    assert cfg.client_ip == "127.0.0.1"
    assert cfg.client_id == f"127.0.0.1@DEFAULT@{os.getpid()}"
    other = ClientConfig.for_namesrv("10.0.0.1:9876", cfg)
    assert other.namesrv_addr == ("10.0.0.1:9876",) and other.client_ip == cfg.client_ip
    with pytest.raises(ConfigError):
        ClientConfig(namesrv_addr=("no-port",))
    with pytest.raises(ConfigError):
        ClientConfig(namesrv_addr=())
    with pytest.raises(ConfigError):
        ClientConfig(request_timeout=0)


async def test_clients_share_one_instance(config: ClientConfig) -> None:
    async with Producer("p1", config=config) as p1, Producer("p2", config=config) as p2, \
            PullConsumer("c1", config=config) as c1:
        assert p1.instance is p2.instance is c1.instance
        data = p1.instance.heartbeat_data()
        assert data is not None
        assert [p.group_name for p in data.producer_data_set] == ["p1", "p2"]
        assert [c.group_name for c in data.consumer_data_set] == ["c1"]
        with pytest.raises(ValueError, match="already registered"):
            await Producer("p1", config=config).start()
        inst = p1.instance
    assert inst.closed
    other = ClientConfig.for_namesrv(config.namesrv_addr, config)
    async with Producer("p1", config=other) as again:
        assert again.instance is not inst


async def test_clients_with_other_credentials_do_not_share_an_instance(
        config: ClientConfig) -> None:
    alice = dataclasses.replace(config, access_key="alice", secret_key="a-secret")
    bob = dataclasses.replace(config, access_key="bob", secret_key="b-secret")
    async with Producer("pa", config=alice) as pa, Producer("pa2", config=alice) as pa2, \
            Producer("pb", config=bob) as pb:
        assert pa.instance is pa2.instance  # the same account shares, as before
        assert pb.instance is not pa.instance  # bob never signs as alice
        assert pb.instance.remoting.credentials is not None
        assert pb.instance.remoting.credentials.access_key == "bob"


async def test_periodic_heartbeat_and_route_refresh(namesrv: FakeNameServer,
                                                    brokers: list[FakeBroker]) -> None:
    namesrv.add_topic("T", brokers)
    config = ClientConfig(namesrv_addr=(namesrv.address,), heartbeat_broker_interval=0.05,
                          poll_name_server_interval=0.05)
    async with Producer("pg", config=config) as producer:
        await producer.send(Message("T", b"x"))
        for broker in brokers:
            await broker.log.wait_for(RequestCode.HEART_BEAT, 2)
        await namesrv.log.wait_for(RequestCode.GET_ROUTEINFO_BY_TOPIC, 3)
    beat = brokers[0].heartbeats[-1]
    assert beat.client_id == config.client_id
    assert [p.group_name for p in beat.producer_data_set] == ["pg"]
    for broker in brokers:
        [bye] = broker.log.of(RequestCode.UNREGISTER_CLIENT)
        header = UnregisterClientRequestHeader.from_ext(bye.ext_fields)
        assert (header.client_id, header.producer_group) == (config.client_id, "pg")


async def test_instance_without_groups_sends_no_heartbeat(namesrv: FakeNameServer,
                                                          brokers: list[FakeBroker],
                                                          config: ClientConfig) -> None:
    namesrv.add_topic("T", brokers)
    inst = ClientInstance(config)
    await inst.start()
    await inst.routes.get("T")
    assert inst.heartbeat_data() is None
    assert await inst.send_heartbeat() == {}
    assert inst.unannounced_brokers() == {b.address for b in brokers}
    await inst.close()
    assert not any(b.log.of(RequestCode.HEART_BEAT) for b in brokers)


async def test_heartbeat_failures_are_reported(namesrv: FakeNameServer,
                                               brokers: list[FakeBroker],
                                               config: ClientConfig) -> None:
    namesrv.add_topic("T", brokers)
    inst = ClientInstance(config)
    inst.register_producer("pg")
    await inst.routes.get("T")
    await brokers[1].close()
    failures = await inst.send_heartbeat()
    assert set(failures) == {brokers[1].address}
    assert inst.unannounced_brokers() == {brokers[1].address}
    await inst.close()

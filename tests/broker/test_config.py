"""BrokerConfig: where the broker listens and what it advertises (brokerIP1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.broker.config import load_broker_config
from tidemq.errors import ConfigError
from tidemq.net.bind import machine_host


def test_listens_and_advertises_loopback_unless_told() -> None:
    broker, _, unknown = load_broker_config(env={})
    assert unknown == []
    assert (broker.bind_address, broker.metrics_host) == ("127.0.0.1", "127.0.0.1")
    assert broker.broker_addr == "127.0.0.1:10911"


def test_rocketmq_key_broker_ip1_is_read(tmp_path: Path) -> None:
    path = tmp_path / "broker.properties"
    path.write_text("brokerIP1=203.0.113.9\nbindAddress=0.0.0.0\nlistenPort=10921\n", "utf-8")
    broker, _, unknown = load_broker_config(path, env={})
    assert unknown == []
    assert broker.broker_ip1 == "203.0.113.9"
    assert broker.broker_addr == "203.0.113.9:10921"


def test_a_wildcard_bind_without_broker_ip1_advertises_this_machine() -> None:
    broker, _, _ = load_broker_config(env={}, overrides={"bindAddress": "0.0.0.0"})
    assert broker.advertised_host == machine_host()


def test_a_given_bind_address_is_advertised() -> None:
    broker, _, _ = load_broker_config(
        env={}, overrides={"bindAddress": "127.0.0.2", "metricsBindAddress": "0.0.0.0"})
    assert broker.advertised_host == "127.0.0.2"
    assert broker.metrics_host == "0.0.0.0"


def test_an_unreachable_broker_ip1_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"brokerIP1 203\.0\.113\.9 is advertised") as err:
        load_broker_config(env={}, overrides={"brokerIP1": "203.0.113.9"})
    assert err.value.key == "brokerIP1"

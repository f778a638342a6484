"""BrokerConfig: where the broker listens and what it advertises (brokerIP1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.broker.config import load_broker_config
from tidemq.broker.runtime_config import config_properties
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


def test_rocketmq_name_of_slave_acting_master_is_read(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("enableSlaveActingMaster=true\n", "utf-8")
    broker, store, unknown = load_broker_config(path, env={})
    assert unknown == []
    assert broker.slave_acting_master
    shown = config_properties(broker, store)  # what getBrokerConfig answers
    assert shown["slaveActingMaster"] == "true" and "enableSlaveActingMaster" not in shown


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


def test_tls_keys_are_read_under_rocketmq_names(tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text("tls.server.mode=enforcing\ntls.server.certPath=/etc/s.crt\n"
                     "tls.server.keyPath=/etc/s.key\ntls.server.need.client.auth=optional\n"
                     "tls.enable=true\ntls.client.trustCertPath=/etc/ca.crt\n")
    broker, _, unknown = load_broker_config(
        props, env={"TIDEMQ_TLS_SERVER_KEY_PASSWORD": "pw"})
    assert unknown == []
    server = broker.tls_server
    assert (server.mode.value, server.cert_path, server.need_client_auth.value,
            server.key_password) == ("enforcing", "/etc/s.crt", "optional", "pw")
    assert "pw" not in repr(broker)
    client = broker.tls_client
    assert client.enable and client.trust_cert_path == "/etc/ca.crt" and client.auth_server


def test_enforcing_tls_without_a_certificate_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load_broker_config(overrides={"tls.server.mode": "enforcing"}, env={})
    assert info.value.key == "tls.server.certPath"
    with pytest.raises(ConfigError) as info:
        load_broker_config(overrides={"tls.server.mode": "sometimes"}, env={})
    assert info.value.key == "tls.server.mode"


def test_metrics_https_needs_certificate_and_key() -> None:
    broker, _, _ = load_broker_config(
        overrides={"metricsCertPath": "/etc/m.crt", "metricsKeyPath": "/etc/m.key"}, env={})
    https = broker.metrics_tls
    assert https is not None and https.cert_path == "/etc/m.crt"
    assert load_broker_config(env={})[0].metrics_tls is None
    with pytest.raises(ConfigError) as info:
        load_broker_config(overrides={"metricsCertPath": "/etc/m.crt"}, env={})
    assert info.value.key == "metricsKeyPath"


def test_controller_mode_keys() -> None:
    base = {"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9876;127.0.0.1:9877",
            "brokerId": "2", "brokerRole": "SYNC_MASTER"}
    cfg, _, unknown = load_broker_config(overrides=base, env={})
    assert not unknown
    assert cfg.controller_addrs == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert cfg.initial_role.value == "SLAVE" and cfg.master_is_sync
    with pytest.raises(ConfigError, match="brokerId") as exc:
        load_broker_config(overrides={**base, "brokerId": "0"}, env={})
    assert exc.value.key == "brokerId"
    with pytest.raises(ConfigError, match="controllerAddr"):
        load_broker_config(overrides={**base, "controllerAddr": ""}, env={})
    with pytest.raises(ConfigError, match="controllerHeartBeatTimeoutMills"):
        load_broker_config(overrides={**base, "brokerHeartbeatInterval": "5000"}, env={})
    # the lease (timeout less two intervals) must outlast an interval
    with pytest.raises(ConfigError, match="three brokerHeartbeatInterval"):
        load_broker_config(overrides={**base, "brokerHeartbeatInterval": "1001"}, env={})
    load_broker_config(overrides={**base, "brokerHeartbeatInterval": "1000"}, env={})


def test_ha_advertised_address() -> None:
    cfg, _, unknown = load_broker_config(overrides={"haAdvertisedAddress": "10.0.0.5:30912"},
                                         env={})
    assert not unknown and cfg.ha_advertised_address == "10.0.0.5:30912"
    for bad in ("10.0.0.5", "10.0.0.5:x", ":1", "h:70000"):
        with pytest.raises(ConfigError, match="haAdvertisedAddress") as exc:
            load_broker_config(overrides={"haAdvertisedAddress": bad}, env={})
        assert exc.value.key == "haAdvertisedAddress"


def test_a_broker_permission_other_than_2_4_or_6_is_refused_at_start(tmp_path: Path) -> None:
    """As updateBrokerConfig refuses it: a broker started with brokerPermission=7 served
    with a value no change at run time could give it."""
    path = tmp_path / "broker.properties"
    for bad in ("0", "1", "7", "8"):
        path.write_text(f"storePathRootDir={tmp_path}\nbrokerPermission={bad}\n", "utf-8")
        with pytest.raises(ConfigError, match=f"brokerPermission must be 2, 4 or 6 .*not {bad}"
                           ) as exc:
            load_broker_config(path, env={})
        assert exc.value.key == "brokerPermission"
    path.write_text(f"storePathRootDir={tmp_path}\nbrokerPermission=4\n", "utf-8")
    assert load_broker_config(path, env={})[0].broker_permission == 4

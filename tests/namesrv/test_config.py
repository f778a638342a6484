"""NamesrvConfig: RocketMQ keys, .properties files, TIDEMQ_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemq.errors import ConfigError
from tidemq.formats.javaprops import env_values
from tidemq.namesrv import NamesrvConfig, load_namesrv_config


def test_defaults_are_upstream() -> None:
    config, unknown = load_namesrv_config(env={})
    assert unknown == []
    assert config == NamesrvConfig()
    assert config.listen_port == 9876
    assert config.scan_not_active_broker_interval == 5000
    assert config.broker_channel_expired_time == 120_000
    assert not config.order_message_enable
    assert config.return_order_topic_config_to_broker
    assert config.idle_seconds == 120.0


def test_properties_file_with_unknown_keys(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text(
        "# a RocketMQ namesrv.properties\n"
        "listenPort=19876\n"
        "scanNotActiveBrokerInterval = 1000\n"
        "brokerChannelExpiredTime: 30000\n"
        "orderMessageEnable=true\n"
        "kvConfigPath=/tmp/kv.json\n"
        "serverChannelMaxIdleTimeSeconds=0\n"
        "clusterTest=false\n",
        "utf-8",
    )
    config, unknown = load_namesrv_config(path, env={})
    assert unknown == ["clusterTest"]
    assert config.kv_config_path == "/tmp/kv.json"
    assert config.listen_port == 19876
    assert config.scan_not_active_broker_interval == 1000
    assert config.broker_channel_expired_time == 30_000
    assert config.order_message_enable
    assert config.idle_seconds is None


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=1\nwaitSecondsForService=3\nenableAllTopicList=true\n")
    env = {
        "TIDEMQ_LISTENPORT": "2",
        "TIDEMQ_WAIT_SECONDS_FOR_SERVICE": "4",
        "TIDEMQ_enableAllTopicList": "false",
        "TIDEMQ_NOT_A_KEY": "x",
        "LISTENPORT": "5",
    }
    config, unknown = load_namesrv_config(path, env=env, overrides={"listenPort": 3})
    assert unknown == []
    assert config.listen_port == 3
    assert config.wait_seconds_for_service == 4
    assert not config.enable_all_topic_list


def test_env_values_matches_keys_and_field_names() -> None:
    env = {"TIDEMQ_LISTENPORT": "1", "TIDEMQ_BROKER_CHANNEL_EXPIRED_TIME": "2",
           "TIDEMQ_scan_not_active_broker_interval": "3", "OTHER_LISTENPORT": "4"}
    assert env_values(NamesrvConfig, env) == {
        "listenPort": "1", "brokerChannelExpiredTime": "2", "scanNotActiveBrokerInterval": "3",
    }
    assert env_values(NamesrvConfig, env, prefix="OTHER_") == {"listenPort": "4"}


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"listenPort": "70000"}, "listenPort"),
        ({"listenPort": "nine"}, "listenPort"),
        ({"scanNotActiveBrokerInterval": "0"}, "scanNotActiveBrokerInterval"),
        ({"brokerChannelExpiredTime": "-1"}, "brokerChannelExpiredTime"),
        ({"orderMessageEnable": "maybe"}, "orderMessageEnable"),
        ({"brokerRejoinWindow": "-1"}, "brokerRejoinWindow"),
    ],
)
def test_bad_values_name_the_key(values: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_namesrv_config(env={}, overrides=values)
    assert info.value.key == key


def test_listens_on_loopback_unless_told() -> None:
    config, _ = load_namesrv_config(env={})
    assert (config.bind_address, config.metrics_host) == ("127.0.0.1", "127.0.0.1")
    config, unknown = load_namesrv_config(env={"TIDEMQ_BINDADDRESS": "0.0.0.0"})
    assert (config.bind_address, config.metrics_host) == ("0.0.0.0", "0.0.0.0")
    config, unknown = load_namesrv_config(
        env={}, overrides={"bindAddress": "0.0.0.0", "metricsBindAddress": "127.0.0.1"})
    assert unknown == []
    assert (config.bind_address, config.metrics_host) == ("0.0.0.0", "127.0.0.1")


def test_empty_bind_address_is_refused() -> None:
    with pytest.raises(ConfigError, match="bindAddress") as err:
        load_namesrv_config(env={}, overrides={"bindAddress": ""})
    assert err.value.key == "bindAddress"


def test_tls_server_keys_are_read_under_rocketmq_names(tmp_path: Path) -> None:
    props = tmp_path / "namesrv.properties"
    props.write_text("tls.server.mode=disabled\ntls.server.certPath=/etc/s.crt\n"
                     "tls.server.keyPath=/etc/s.key\n")
    config, unknown = load_namesrv_config(props, env={"TIDEMQ_TLS_SERVER_MODE": "permissive"})
    assert unknown == []
    assert config.tls_server.mode.value == "permissive"  # the environment wins
    assert config.tls_server.active
    assert not NamesrvConfig().tls_server.active  # no certificate: plain
    with pytest.raises(ConfigError) as info:
        NamesrvConfig(tls_server_mode="enforcing")
    assert info.value.key == "tls.server.certPath"

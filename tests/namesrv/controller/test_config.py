"""The controller's settings."""

from __future__ import annotations

from tidemq.namesrv.controller.config import load_controller_config


def test_rocketmq_name_of_the_scan_interval_is_read() -> None:
    config, unknown = load_controller_config(
        overrides={"scanNotActiveBrokerInterval": "1000"}, env={})
    assert unknown == []
    assert config.controller_scan_interval == 1000

"""Every client role shares one lifecycle (tidemq.client.role): ``instance`` only while
started, ``async with`` starts and closes, and the error names the role."""

from __future__ import annotations

from typing import Any

import pytest

from tidemq.client import (
    AdminClient,
    ClientConfig,
    LmqConsumer,
    Producer,
    PullConsumer,
    PushConsumer,
    ThreadedPushConsumer,
)
from tidemq.client.errors import ClientClosedError
from tidemq.client.role import InstanceRole

from .fakes import FakeBroker


async def _async_listener(msgs: Any) -> Any:
    raise AssertionError("no message is sent in this test")


def _blocking_listener(msgs: Any) -> Any:
    raise AssertionError("no message is sent in this test")


def _roles(config: ClientConfig, broker: FakeBroker) -> list[InstanceRole]:
    return [
        Producer("pg", config=config),
        PullConsumer("cg", config=config),
        LmqConsumer("lg", broker_addr=broker.address, config=config),
        PushConsumer("push", config=config, listener=_async_listener),
        ThreadedPushConsumer("tpush", config=config, listener=_blocking_listener),
        AdminClient(config=config),
    ]


def test_instance_before_start_names_the_role(config: ClientConfig,
                                              brokers: list[FakeBroker]) -> None:
    for role in _roles(config, brokers[0]):
        with pytest.raises(ClientClosedError) as caught:
            _ = role.instance
        assert type(role).__name__ in caught.value.what


async def test_async_with_starts_and_closes(config: ClientConfig,
                                            brokers: list[FakeBroker]) -> None:
    for role in _roles(config, brokers[0]):
        async with role as entered:
            assert entered is role  # the role itself, typed as its own class
            assert role.instance.config.namesrv_addr == config.namesrv_addr
        with pytest.raises(ClientClosedError):
            _ = role.instance

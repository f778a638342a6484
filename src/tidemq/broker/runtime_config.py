"""What GET_BROKER_CONFIG (26) shows and what UPDATE_BROKER_CONFIG (25) may change.

A running broker shows every broker and store key with its current value (secrets, the
fields declared ``repr=False``, as ``******``). Only the keys of :data:`RUNTIME_KEYS`
change while it runs, because only they are read again at each request (or are applied
to the table that reads them by :func:`apply`); every other key is refused, naming the
key, and needs ``broker.properties`` and a restart. A change is kept across restarts in the
store's ``config/runtimeOverrides.properties`` (:mod:`tidemq.broker.config_overrides`).

Both bodies are Java properties text (``key=value`` lines), as upstream's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from tidemq.broker.config import BrokerConfig
from tidemq.codec.bodies import TopicConfigSerializeWrapper
from tidemq.errors import ConfigError
from tidemq.formats.javaprops import config_keys, describe, runtime_update
from tidemq.store.config import StoreConfig

if TYPE_CHECKING:
    from tidemq.broker.context import BrokerContext

__all__ = ["RUNTIME_KEYS", "ConfigRefused", "apply", "config_properties", "plan_update",
           "registered_topics"]

#: RocketMQ key -> what it changes at once.
RUNTIME_KEYS: Mapping[str, str] = {
    "brokerPermission": "sends refused without 2 (write); the name servers hear the topics' "
                        "permissions limited to it at the next registration",
    "autoCreateTopicEnable": "whether a send to an unknown topic creates it",
    "autoCreateSubscriptionGroup": "whether a heartbeat of an unknown group creates it",
    "maxPullBytes": "the largest pull answer when the request names no limit",
    "longPollingEnable": "held pulls wait for their own timeout (else shortPollingTimeMills)",
    "shortPollingTimeMills": "how long a held pull waits without long polling, ms",
}

class ConfigRefused(ValueError):
    """An UPDATE_BROKER_CONFIG the broker will not apply; ``key`` is the first bad key."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(why)
        self.key = key


def config_properties(config: BrokerConfig, store: StoreConfig) -> dict[str, str]:
    """Every broker and store key -> its current value as text, secrets masked."""
    return dict(sorted({**describe(StoreConfig, store),
                        **describe(BrokerConfig, config)}.items()))


def plan_update(config: BrokerConfig, changes: Mapping[str, str]) -> BrokerConfig:
    """The config after ``changes``; raises :class:`ConfigRefused` naming the first key
    that is unknown, cannot change at run time, or has a bad value. Changes nothing."""
    try:
        new = runtime_update(BrokerConfig, config, changes, RUNTIME_KEYS, server="the broker",
                             known=set(config_keys(BrokerConfig)) | set(config_keys(StoreConfig)))
    except ConfigError as exc:
        raise ConfigRefused(exc.key or "", str(exc)) from None
    if new.max_pull_bytes < 1 or new.short_polling_time_mills < 0:
        raise ConfigRefused("maxPullBytes" if new.max_pull_bytes < 1 else
                            "shortPollingTimeMills", "the value must not be negative or zero")
    return new


def apply(ctx: BrokerContext, new: BrokerConfig) -> None:
    """Make ``new`` the broker's config, and tell the tables that keep a copy."""
    old, ctx.config = ctx.config, new
    ctx.topics.auto_create = new.auto_create_topic_enable
    ctx.subscription_groups.auto_create = new.auto_create_subscription_group
    if old.broker_permission != new.broker_permission:
        ctx.topics.new_version()
        ctx.topics_changed()  # registers again, with the new limit


def registered_topics(wrapper: TopicConfigSerializeWrapper, broker_permission: int
                      ) -> TopicConfigSerializeWrapper:
    """The topic table as registered with the name servers: with the broker not both
    readable and writable, each topic's permission limited to the broker's (upstream's
    rule)."""
    if broker_permission & 6 == 6:
        return wrapper
    table = {name: msgspec.structs.replace(tc, perm=tc.perm & broker_permission)
             for name, tc in wrapper.topic_config_table.items()}
    return msgspec.structs.replace(wrapper, topic_config_table=table)

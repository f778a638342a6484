"""What GET_NAMESRV_CONFIG (319) shows and what UPDATE_NAMESRV_CONFIG (318) may change.

Every key is shown with its current value (secrets masked). Only the keys of
:data:`RUNTIME_KEYS` change while the name server runs, because only they are read again
at each request (or applied by the caller); any other key is refused, naming it. A
change is kept across restarts in ``runtimeOverrides.properties`` beside the KV config
(:mod:`tidemq.namesrv.config_overrides`); without ``kvConfigPath`` it lasts until the
name server restarts. Both bodies are Java properties text.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemq.formats.javaprops import runtime_update
from tidemq.namesrv.config import NamesrvConfig

__all__ = ["RUNTIME_KEYS", "plan_update"]

#: RocketMQ key -> what it changes at once.
RUNTIME_KEYS: Mapping[str, str] = {
    "orderMessageEnable": "routes carry orderTopicConf",
    "returnOrderTopicConfigToBroker": "registrations are answered with the ordered-topic "
                                      "settings",
    "enableAllTopicList": "GET_ALL_TOPIC_LIST_FROM_NAMESERVER is answered",
    "deleteTopicWithBrokerRegistration": "a master's registration drops the topics it "
                                         "left out",
}


def plan_update(config: NamesrvConfig, changes: Mapping[str, str]) -> NamesrvConfig:
    """The config after ``changes``; raises :class:`~tidemq.errors.ConfigError` naming the
    first key that is unknown, cannot change at run time or has a bad value."""
    return runtime_update(NamesrvConfig, config, changes, RUNTIME_KEYS, server="the name server")

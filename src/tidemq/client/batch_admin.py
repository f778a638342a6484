"""Topics and subscription groups created or updated in batch, as mqadmin's
``updateTopicList`` and ``updateSubGroupList`` do.

===============================  ==========================================================
operation                        requests
===============================  ==========================================================
:func:`update_topics`            18 UPDATE_AND_CREATE_TOPIC_LIST on each address
:func:`update_groups`            225 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST on each address
===============================  ==========================================================

A broker checks every config of a list before it keeps any: one it refuses
(INVALID_PARAMETER, naming why) leaves that broker unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tidemq.codec.bodies import CreateTopicListRequestBody, TopicConfig, encode_body
from tidemq.codec.command import RemotingCommand, RequestCode

if TYPE_CHECKING:
    from tidemq.client.admin import AdminClient

__all__ = ["update_groups", "update_topics"]


async def update_topics(admin: AdminClient, configs: Sequence[TopicConfig],
                        addrs: Sequence[str]) -> None:
    """Create or update every topic of ``configs`` on each broker of ``addrs``."""
    body = encode_body(CreateTopicListRequestBody(topic_config_list=list(configs)))
    for addr in addrs:
        await admin.request(addr, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body))
    for config in configs:
        admin.instance.routes.forget(config.topic_name)


async def update_groups(admin: AdminClient, configs: Sequence[Mapping[str, Any]],
                        addrs: Sequence[str]) -> None:
    """Create or replace every subscription group of ``configs`` (SubscriptionGroupConfig
    members) on each broker of ``addrs``."""
    body = json.dumps({"groupConfigList": [dict(c) for c in configs]},
                      sort_keys=True).encode()
    for addr in addrs:
        await admin.request(addr, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST, body=body))

"""A replica's copy of its master's logical-queue mappings.

The logical-queue sync brokers run among themselves goes from broker name to broker name,
and a replica shares its master's name: it neither asks its master nor is pushed to, so
without this copy a replica elected master would not know the topic is logical, nor
where its segments are, and would take sends to the segment's physical queue as a plain
topic's. With every metadata copy the replica therefore reads, for every topic whose
config the master marks as mapped (the ``logical.queues`` attribute), the master's
mapping (QUERY_LOGICAL_QUEUE_MAPPING) and merges it into its own; a mapping the master no
longer holds is dropped, as the master's topic config is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from tidemq.broker.logical import LogicalQueues, TopicMapping
from tidemq.codec.bodies import TopicConfigSerializeWrapper
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, TideMQError
from tidemq.net import RemotingClient

__all__ = ["MAPPED", "copy_mappings"]

log = logging.getLogger(__name__)

#: The topic-config attribute a broker sets on a topic it holds a mapping of.
MAPPED = "logical.queues"


async def copy_mappings(client: RemotingClient, addr: str,
                        topics: TopicConfigSerializeWrapper, lqs: LogicalQueues,
                        changed: Callable[[TopicMapping | None, str], None]) -> None:
    """Take the mappings of the master at ``addr`` whose topics ``topics`` (its topic
    configs) marks; ``changed(mapping, topic)`` after each one that changed here
    (``None``: dropped)."""
    mapped = sorted(name for name, tc in topics.topic_config_table.items()
                    if MAPPED in tc.attributes)
    for topic in mapped:
        resp = await client.request(addr, RemotingCommand.request(
            RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": topic}), 10.0)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            continue  # deleted since the topic configs were read
        if resp.code != ResponseCode.SUCCESS:
            raise TideMQError(f"QUERY_LOGICAL_QUEUE_MAPPING {topic}: answer {resp.code} "
                              f"{resp.remark}")
        mapping = TopicMapping.from_json(json.loads(resp.full_body()))
        try:
            took = lqs.update(mapping, older=True)
        except ValueError as exc:  # another incarnation, or facts that contradict: the
            log.warning("the master's mapping of %s replaces this replica's: %s", topic, exc)
            took = lqs.update(mapping, force=True)  # master's is the one it will serve
        if took:
            changed(lqs.get(topic), topic)
    for topic in sorted(set(lqs.mappings) - set(mapped)):
        if lqs.delete(topic):
            changed(None, topic)

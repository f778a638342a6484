"""How a broker's copies of the logical-queue mappings converge with its peers': compared
at start and on a timer, merged, exchanged when a forward says "moved", pushed to peers
holding less (:mod:`tidemq.formats.logical_migration`)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from tidemq.broker.logical import LogicalQueues, TopicMapping
from tidemq.broker.processors.logical.forwarding import Forwarder
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import (
    ResponseCode,
    TideMQError,
)
from tidemq.formats.logical_migration import MappingConflict

__all__ = ["MappingSync"]

log = logging.getLogger(__name__)


class MappingSync:
    def __init__(self, fwd: Forwarder, lqs: LogicalQueues,
                 changed: Callable[[TopicMapping], None]) -> None:
        self.fwd = fwd
        self.ctx = fwd.ctx
        self.lqs = lqs
        self.changed = changed  # a held mapping changed: re-register the topic

    async def sync(self) -> list[str]:
        """Every mapping held compared with the other brokers' copies: what this broker
        missed (a push, a seal, a commit) is merged in, a migration whose old segment is
        sealed is committed, and a peer holding less gets the result. Returns the topics
        whose mapping changed here."""
        if not self.lqs.mappings:
            return []
        # Ask the name server for the brokers when a mapping names one without an address,
        # and when no peer is known at all: a broker cut out of a logical queue while it
        # was down comes back with a copy that names only itself, and the brokers holding
        # the current copy are found nowhere else.
        if not set(self.ctx.broker_addresses) - {self.fwd.me} or any(
                b not in self.ctx.broker_addresses for m in self.lqs.mappings.values()
                for b in m.brokers()):
            await self.fwd.lookup_addresses()
        changed = []
        for topic in sorted(self.lqs.mappings):
            before = self.lqs.get(topic)
            if before is None:
                continue
            peers = sorted((before.brokers() | set(self.ctx.broker_addresses)) - {self.fwd.me})
            copies = await asyncio.gather(*(self.peer_copy(b, topic) for b in peers))
            for broker, copy in zip(peers, copies, strict=True):
                if copy is not None:
                    try:
                        self.lqs.absorb(copy)
                    except MappingConflict as exc:  # only racing admin tools do that
                        log.warning("%s's copy of %s contradicts ours, not taken: %s",
                                    broker, topic, exc)
            self.lqs.absorb(before)  # commits a sealed migration even with no peer up
            held = self.lqs.get(topic)
            if held is None:
                continue
            if held != before:
                changed.append(topic)
                self.changed(held)
            for broker, copy in zip(peers, copies, strict=True):
                if copy is not None and copy != held:
                    self.fwd.spawn(self.push_to(broker, held))
        return changed

    async def exchange(self, broker: str, topic: str) -> None:
        """``broker``'s copy of ``topic`` merged in here, and ours pushed there if it
        differs: the two agree afterwards (when both are up)."""
        copy = await self.peer_copy(broker, topic)
        if copy is None:
            return
        try:
            changed = self.lqs.absorb(copy)
        except MappingConflict as exc:
            log.warning("%s's copy of %s contradicts ours, not taken: %s", broker, topic, exc)
            return
        if changed:
            held = self.lqs.get(topic)
            assert held is not None
            self.changed(held)
        held = self.lqs.get(topic)
        if held is not None and held != copy:
            await self.push_to(broker, held)

    async def peer_copy(self, broker: str, topic: str) -> TopicMapping | None:
        addr = self.ctx.broker_addresses.get(broker)
        if addr is None:
            return None
        try:
            resp = await self.ctx.client.request(addr, RemotingCommand.request(
                RequestCode.QUERY_LOGICAL_QUEUE_MAPPING, {"topic": topic}), 2.0)
            if resp.code != ResponseCode.SUCCESS:
                return None
            self.fwd.ends.take(topic, resp.ext_fields.get("ends"))
            return TopicMapping.from_json(json.loads(resp.full_body()))
        except (TideMQError, ValueError, KeyError, TypeError) as exc:
            log.debug("reading %s's mapping of %s failed: %s", broker, topic, exc)
            return None

    async def push_to(self, broker: str, mapping: TopicMapping) -> None:
        addr = self.ctx.broker_addresses.get(broker)
        if addr is None:
            return
        cmd = RemotingCommand.request(RequestCode.UPDATE_LOGICAL_QUEUE_MAPPING, {},
                                      json.dumps(mapping.to_json()).encode())
        try:
            resp = await self.ctx.client.request(addr, cmd, 3.0)
        except TideMQError as exc:
            log.info("pushing the logical mapping to %s failed: %s", broker, exc)
            return
        if resp.code != ResponseCode.SUCCESS:
            log.info("%s refused the logical mapping of %s: %s", broker, mapping.topic,
                     resp.remark)

    def push_others(self, mapping: TopicMapping) -> None:
        for broker in sorted(mapping.brokers() - {self.fwd.me}):
            self.fwd.spawn(self.push_to(broker, mapping))

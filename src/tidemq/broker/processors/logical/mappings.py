"""The admin codes of logical queues (docs/protocol.md): 20100 UPDATE_LOGICAL_QUEUE_MAPPING
(body = mapping JSON), 20101 QUERY_LOGICAL_QUEUE_MAPPING, 20102 SEAL_LOGICAL_QUEUE, 20103
DELETE_LOGICAL_QUEUE_MAPPING; expiry of sealed segments; the topic config a mapped topic
registers."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging

from tidemq.broker.logical import LogicalQueues, Segment, SegmentState, TopicMapping
from tidemq.broker.processors.logical.forwarding import Forwarder, to_int
from tidemq.broker.processors.logical.sends import LogicalSends
from tidemq.broker.processors.logical.sync import MappingSync
from tidemq.codec.bodies import TopicConfig
from tidemq.codec.command import RemotingCommand
from tidemq.errors import (
    ResponseCode,
    error_for_code,
)
from tidemq.net import Connection

__all__ = ["MappingAdmin", "logical_topic_config"]

log = logging.getLogger(__name__)


class MappingAdmin:
    def __init__(self, fwd: Forwarder, lqs: LogicalQueues, sync: MappingSync,
                 sends: LogicalSends) -> None:
        self.fwd = fwd
        self.ctx = fwd.ctx
        self.lqs = lqs
        self.sync = sync
        self.sends = sends
        self._cut_reported: set[tuple[str, int, int]] = set()

    def mapping_changed(self, mapping: TopicMapping | None, topic: str | None = None) -> None:
        """A logical-queue mapping changed: register the topic's physical queues and its
        ``logical.queues`` attribute so the name server publishes the placeholder route.
        Not while the topic's deletion is under way (:mod:`tidemq.broker.topic_deletion`):
        registered then, it would take sends into the queues the deletion removes; the
        mapping is kept, and its next change registers the topic."""
        if mapping is not None:
            if mapping.topic not in self.ctx.topics.deleting:
                self.ctx.topics.upsert(logical_topic_config(mapping,
                                                            self.ctx.config.broker_name))
            self.sends.notify(mapping.topic)
            self.report_cut_tails(mapping)
        elif topic is not None:
            self.ctx.topics.delete(topic)
        self.ctx.topics_changed()

    def report_cut_tails(self, mapping: TopicMapping) -> None:
        """A segment of this broker that a forced cut sealed while it was down, below what
        its physical queue holds: the messages past the cut are not in the logical queue
        (docs/logical-queues.md). Said once per segment, at WARNING, with the range."""
        for lq, segs in mapping.queues.items():
            for s in segs:
                key = (mapping.topic, s.queue_id, s.physical_end)
                if not s.forced or s.broker != self.fwd.me or key in self._cut_reported:
                    continue
                held = self.ctx.store.next_queue_offset(mapping.topic, s.queue_id)
                if held > s.physical_end:
                    self._cut_reported.add(key)
                    log.warning("logical queue %s/%d was cut at physical offset %d of queue %d "
                                "while this broker was unreachable; the %d messages it holds "
                                "past the cut (physical offsets %d..%d) are not part of the "
                                "logical queue", mapping.topic, lq, s.physical_end, s.queue_id,
                                held - s.physical_end, s.physical_end, held - 1)

    def update_mapping(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.take(cmd, None)
        addrs = cmd.ext_fields.get("brokerAddrs")
        if addrs:
            with contextlib.suppress(ValueError, TypeError):
                self.ctx.broker_addresses.update({
                    str(k): str(v) for k, v in dict(json.loads(addrs)).items()
                    if k != self.fwd.me})
        return cmd.response()

    def take(self, cmd: RemotingCommand, topic: str | None, *, older: bool = False) -> None:
        """The mapping in ``cmd``'s body, merged into the one held (replacing it when
        ``force``); the topic re-registered if it changed. ``topic``: the one it must map;
        ``older``: an older epoch is merged in rather than refused."""
        try:
            mapping = TopicMapping.from_json(json.loads(cmd.full_body()))
        except (ValueError, KeyError, TypeError) as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER, f"bad mapping: {exc}") from None
        if topic is not None and mapping.topic != topic:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"the mapping is of {mapping.topic}, not {topic}")
        try:
            changed = self.lqs.update(mapping, force=cmd.ext_fields.get("force") == "true",
                                      older=older)
        except ValueError as exc:
            raise error_for_code(ResponseCode.ILLEGAL_OPERATION, str(exc)) from None
        if changed:
            held = self.lqs.get(mapping.topic)
            assert held is not None
            self.mapping_changed(held)

    def query_mapping(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        mapping = self.lqs.get(topic)
        if mapping is None:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST,
                                 f"{topic} has no logical-queue mapping on {self.fwd.me}")
        resp = cmd.response(body=json.dumps(mapping.to_json()).encode())
        own = {(s.broker, s.queue_id): self.ctx.store.next_queue_offset(topic, s.queue_id)
               for segs in mapping.queues.values() for s in segs
               if s.broker == self.fwd.me and s.state is SegmentState.NORMAL}
        resp.ext_fields["ends"] = self.fwd.ends.encode(topic, own)
        return resp

    def seal(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Seal the NORMAL segment of ``lq`` held here at its exact end. Runs on the event
        loop like every append, so no send can slip in between reading the end and the
        fence going up."""
        topic = cmd.ext_fields.get("topic", "")
        lq = to_int(cmd.ext_fields.get("lq"), -1)
        if cmd.full_body():  # the admin's copy: the pending segment, even if a push missed
            self.take(cmd, topic, older=True)  # merged, even below an epoch bumped here
        mapping = self.lqs.get(topic)
        if mapping is None or lq not in mapping.queues:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST, f"no logical queue {topic}/{lq}")
        segs = mapping.queues[lq]
        idx = next((i for i in range(len(segs) - 1, -1, -1)
                    if segs[i].state is SegmentState.NORMAL), None)
        if idx is None:  # already sealed: idempotent for a resumed migration
            return cmd.response(body=json.dumps(mapping.to_json()).encode())
        seg = segs[idx]
        if seg.broker != self.fwd.me:
            raise error_for_code(ResponseCode.ILLEGAL_OPERATION,
                                 f"{topic}/{lq} is open on {seg.broker}, not {self.fwd.me}")
        with self.ctx.store.commitlog.lock:
            end = self.ctx.store.next_queue_offset(topic, seg.queue_id)
        sealed = dataclasses.replace(seg, physical_end=max(end, seg.physical_start),
                                     state=SegmentState.READONLY)
        new = mapping.replace(lq, (*segs[:idx], sealed, *segs[idx + 1:]), mapping.epoch + 1)
        self.lqs.update(new)
        self.mapping_changed(new)
        # Pulls held on the sealed queue wait for messages that will never come: answer
        # them now, so readers move on to the next segment at once.
        self.ctx.holds.notify(topic, seg.queue_id, 1 << 62)
        return cmd.response(body=json.dumps(new.to_json()).encode())

    def expire_segments(self) -> list[TopicMapping]:
        """Sealed segments hosted here whose data retention removed become EXPIRED (RIP-21
        scenario b); the new mapping is pushed to the other brokers. Returns the changes."""
        changed = []
        for mapping in list(self.lqs.mappings.values()):
            new = mapping
            for lq, segs in mapping.queues.items():
                updated = tuple(
                    dataclasses.replace(s, state=SegmentState.EXPIRED)
                    if s.broker == self.fwd.me and s.state is SegmentState.READONLY
                    and self._data_removed(mapping.topic, s) else s for s in segs)
                if updated != segs:
                    new = new.replace(lq, updated, new.epoch + 1)
            if new is not mapping:
                self.lqs.update(new)
                self.mapping_changed(new)
                self.sync.push_others(new)
                changed.append(new)
        return changed

    def _data_removed(self, topic: str, s: Segment) -> bool:
        """Whether retention removed every message of the sealed segment ``s`` held
        here. A forced cut may end past what its queue holds (a margin): its data end
        where the queue does."""
        store = self.ctx.store
        end = s.physical_end
        if s.forced:
            end = min(end, store.max_offset(topic, s.queue_id))
        return store.min_offset(topic, s.queue_id) >= end and (
            end == s.physical_start or store.max_offset(topic, s.queue_id) >= end)

    def delete_mapping(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        if self.lqs.delete(topic):
            self.fwd.ends.forget(topic)
            self.mapping_changed(None, topic)
        return cmd.response()


def logical_topic_config(mapping: TopicMapping, broker: str) -> TopicConfig:
    """The topic config a broker registers for a mapped topic: its physical queues, and
    the attributes the name server turns into the ``__logical__`` route."""
    pqs = mapping.physical_queues(broker)
    n = max(pqs) + 1 if pqs else 0
    writable = max((lq + 1 for lq in mapping.queues
                    if mapping.leader(lq) is not None or mapping.pending(lq) is not None),
                   default=0)
    return TopicConfig(topic_name=mapping.topic, read_queue_nums=n, write_queue_nums=n, perm=6,
                       attributes={"logical.queues": str(mapping.total),
                                   "logical.writable": str(writable),
                                   "logical.epoch": str(mapping.epoch)})

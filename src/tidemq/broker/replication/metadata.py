"""A replica's copy of its master's metadata (RocketMQ's slave synchronisation).

Every ``slaveMetadataSyncInterval`` ms, and as soon as the master's address is known
(the name servers answer it to the replica's registration, which is repeated every
interval while the master is unknown), the replica reads from its master -- with
RocketMQ's request codes -- the topic configs (GET_ALL_TOPIC_CONFIG, 21), the consumer
offsets (GET_ALL_CONSUMER_OFFSET, 43), the delayed-delivery progress
(GET_ALL_DELAY_OFFSET, 45, with the timer messages' checkpoint TideMQ adds to it) and
the subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201), and takes each table
whole, as upstream's ``SlaveSynchronize`` does -- but for the consumer offsets it took
itself while the master was down, which it first sends to the master where the master's
are lower (:mod:`tidemq.broker.replication.carried_offsets`), and for the delay and timer
progress, which only move forward (what it delivered acting for a master that came back
with older progress stays, :mod:`tidemq.broker.replication.reclaim`); then the ACL 2.0
users and ACLs (TideMQ's GET_AUTH_METADATA, 20300; skipped when the master does not serve it) and,
with LMQ on, the light message queues' tombstones and consumer offsets (TideMQ's
GET_LMQ_METADATA, 20201, page by page): an LMQ the master deleted is deleted here at the
same commit-log offset, and each offset is taken as the master's. So is a topic: with the
topic configs the replica reads the master's topic-deletion marks (TideMQ's
GET_DELETED_TOPICS, 20202) and deletes each topic at the master's offset
(:meth:`~tidemq.store.message_store.MessageStore.adopt_topic_deletions`) -- whether its
log is behind that offset or past it, with the topic created again above it. A topic gone
from the table of a master that sends no marks (RocketMQ's) is deleted here at this log's
end, with its consume queues. A controller-mode master also
tells its in-sync replicas of each topic or group change, and they copy at once
(:mod:`tidemq.broker.replication.metadata_push`). Logical-queue mappings reach the
other broker groups through the logical-queue sync all brokers run, and a replica from
its master with every copy (:mod:`tidemq.broker.replication.logical_copy`). A master does
not run this.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Container, Iterator, Mapping
from typing import Any

from tidemq.broker.context import BrokerContext
from tidemq.broker.groups import TABLE, SubscriptionGroupManager
from tidemq.broker.logical import TopicMapping
from tidemq.broker.offset_json import load_offset_json, load_table_json
from tidemq.broker.offsets import OffsetIndex, OffsetManager, index_of
from tidemq.broker.replication.carried_offsets import OffsetKey
from tidemq.broker.replication.logical_copy import copy_mappings
from tidemq.broker.replication.reclaim import (
    parse_delay_progress,
    parse_lmq_offsets,
    parse_lmq_tombstones,
    parse_offset_table,
)
from tidemq.broker.topics import TopicManager
from tidemq.codec.bodies import TopicConfig, TopicConfigSerializeWrapper
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import UpdateConsumerOffsetRequestHeader
from tidemq.codec.topic_table import decode_topics
from tidemq.errors import ResponseCode, TideMQError
from tidemq.store.lmq_store import LMQ_PREFIX, LmqStore

__all__ = ["MetadataSync"]

log = logging.getLogger(__name__)


def _ignore(_mapping: TopicMapping | None, _topic: str) -> None:
    pass


def _offset_table(body: bytes) -> dict[str, dict[int, int]]:
    """GET_ALL_CONSUMER_OFFSET's body, a key at a time (on a thread)."""
    return parse_offset_table(load_offset_json(body))


def _topics_differing(topics: TopicManager, wrapper: TopicConfigSerializeWrapper
                      ) -> tuple[list[TopicConfig], list[str]]:
    """The master's topic configs the replica holds otherwise or lacks, and the replica's
    topics the master lacks (on a thread, a topic at a time: the loop serves on
    meanwhile, and takes only these)."""
    mine = topics.topics
    table = wrapper.topic_config_table
    differ = [tc for tc in table.values() if mine.get(tc.topic_name) != tc]
    return differ, [name for name in list(mine) if name not in table]


def _copied_topics(topics: TopicManager, body: bytes
                   ) -> tuple[TopicConfigSerializeWrapper, list[TopicConfig], list[str]]:
    wrapper = decode_topics(body, TopicConfigSerializeWrapper)
    return wrapper, *_topics_differing(topics, wrapper)


def _group_table(body: bytes) -> Any:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's body, a group at a time (on a thread)."""
    return load_table_json(body, TABLE)


def _groups_differ(groups: SubscriptionGroupManager, wrapper: Any) -> bool:
    """Whether the master's groups differ from the replica's, a group at a time (on a
    thread: the loop serves on meanwhile)."""
    table = wrapper.get(TABLE, {}) if isinstance(wrapper, dict) else {}
    return groups.differs(table)


def _copied_groups(groups: SubscriptionGroupManager, body: bytes) -> tuple[Any, bool]:
    wrapper = _group_table(body)
    return wrapper, _groups_differ(groups, wrapper)


def _examine(offsets: OffsetManager, table: dict[str, dict[int, int]]
             ) -> tuple[bool, OffsetIndex]:
    """Whether ``table`` differs from the replica's offsets, and its index (on a
    thread: ``table`` is held by nothing else yet)."""
    return offsets.differs(table), index_of(table)


def _marks(body: bytes) -> dict[str, int]:
    """GET_DELETED_TOPICS's body; ``ValueError`` when it is not one."""
    try:
        table = json.loads(body)["topics"]
        marks = {str(topic): offset for topic, offset in table.items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"GET_DELETED_TOPICS: not a table of marks ({exc!r})") from None
    if not all(type(offset) is int and offset >= 0 for offset in marks.values()):
        raise ValueError("GET_DELETED_TOPICS: a mark is not a commit-log offset")
    return marks


def _lmq_tombstones_to_take(lmq: LmqStore, body: bytes
                            ) -> tuple[list[tuple[str, int]], list[tuple[str, int]], bool]:
    """A page of the master's LMQ tombstones (on a thread, a row at a time): its rows,
    those of them later than this replica's, and whether more follow."""
    rows, more = parse_lmq_tombstones(json.loads(body))
    return rows, [(name, floor) for name, floor in rows if lmq.floor(name) < floor], more


def _lmq_offsets_to_take(lmq: LmqStore, body: bytes, taken: Container[OffsetKey]
                         ) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]], bool]:
    """A page of the master's LMQ consumer offsets (on a thread, a row at a time): its
    rows, those of them this replica holds otherwise or took itself (the others it has
    already), and whether more follow."""
    rows, more = parse_lmq_offsets(json.loads(body))
    differ = [(name, group, offset) for name, group, offset in rows
              if (group, name, 0) in taken or lmq.committed_offset(group, name) != offset]
    return rows, differ, more


class _ByKey(Mapping[OffsetKey, int]):
    """The master's offset table looked up by (group, topic, queue id), without a copy."""

    def __init__(self, table: dict[str, dict[int, int]]) -> None:
        self.table = table

    def __getitem__(self, key: OffsetKey) -> int:
        group, topic, queue_id = key
        return self.table[OffsetManager.key(topic, group)][queue_id]

    def __iter__(self) -> Iterator[OffsetKey]:
        for name, queues in self.table.items():
            topic, _, group = name.partition("@")
            for queue_id in queues:
                yield group, topic, queue_id

    def __len__(self) -> int:
        return sum(len(queues) for queues in self.table.values())


class MetadataSync:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.interval = ctx.config.slave_metadata_sync_interval / 1000
        self.master_addr = ""
        self.syncs = 0
        self.last_error = ""
        self._wake = asyncio.Event()
        #: Set after every completed copy (tests and tools wait on it).
        self.synced = asyncio.Event()
        #: Asks the name servers again (a registration) while the master is unknown.
        self.ask_master: Callable[[], object] | None = None
        #: Called when a copied logical-queue mapping changed here (``None``: dropped).
        self.on_mapping: Callable[[TopicMapping | None, str], None] = _ignore
        self._copying = asyncio.Lock()

    def master_known(self, addr: str) -> None:
        """The registrar learned the master's address."""
        self.master_addr = addr
        self._wake.set()

    async def run(self) -> None:
        while True:
            replica = not self.ctx.replication.role.is_master
            if not replica:
                self.ctx.carried_offsets.clear()
            if replica and not self.master_addr and self.ask_master is not None:
                self.ask_master()  # the master may have registered after this broker
            if self.master_addr and replica:
                try:
                    await self.copy_now()
                except (TideMQError, ValueError, KeyError, TypeError) as exc:
                    self.last_error = f"{self.master_addr}: {exc}"
                    log.warning("copying metadata from master %s failed: %s",
                                self.master_addr, exc)
            self._wake.clear()
            # Not wait_for: on Python 3.11 it drops a cancellation (the broker
            # stopping) that lands in the step the wake-up comes.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()

    async def copy_now(self, *, lmq: bool = True) -> None:
        """Copy the master's metadata now (one copy at a time: a master's notice of a
        change waits for a copy under way, then makes its own). ``lmq=False`` leaves the
        LMQ offsets and tombstones to the next periodic copy: a notice of a topic or
        group change need not page through millions of LMQ offsets."""
        async with self._copying:
            await self.sync_once(self.master_addr, lmq=lmq)

    async def _read(self, addr: str, code: int) -> bytes:
        resp = await self.ctx.client.request(addr, RemotingCommand.request(code), 10.0)
        if resp.code != 0:
            raise TideMQError(f"request code {code}: answer {resp.code} {resp.remark}")
        return resp.full_body()

    async def _carry(self, addr: str, table: dict[str, dict[int, int]]
                     ) -> dict[OffsetKey, int]:
        """Send the master the offsets this replica took that it lacks or holds lower
        (``table``: its offsets; LMQ offsets are carried by :meth:`_lmq`); those it
        took, to keep in the copy."""
        carry = {key: offset
                 for key, offset in self.ctx.carried_offsets.to_carry(_ByKey(table)).items()
                 if not key[1].startswith(LMQ_PREFIX)}
        return await self._send_offsets(addr, carry)

    async def _send_offsets(self, addr: str, carry: dict[OffsetKey, int]
                            ) -> dict[OffsetKey, int]:
        """UPDATE_CONSUMER_OFFSET of each of ``carry`` to the master; the ones it took.
        All are forgotten as carried: one the master refuses is not sent again."""
        if not carry:
            return {}

        async def one(key: OffsetKey, offset: int) -> bool:
            group, topic, queue_id = key
            header = UpdateConsumerOffsetRequestHeader(
                consumer_group=group, topic=topic, queue_id=queue_id, commit_offset=offset)
            resp = await self.ctx.client.request(addr, RemotingCommand.request(
                RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext()), 10.0)
            if resp.code != ResponseCode.SUCCESS:
                log.warning("master %s refused the offset %d of %s on %s/%d taken while it "
                            "was down: %s", addr, offset, group, topic, queue_id, resp.remark)
            return resp.code == ResponseCode.SUCCESS

        taken = await asyncio.gather(*(one(k, o) for k, o in carry.items()))
        self.ctx.carried_offsets.carried(carry)
        log.info("carried %d consumer offsets taken while the master was down to %s",
                 sum(taken), addr)
        return {k: o for (k, o), ok in zip(carry.items(), taken, strict=True) if ok}

    async def sync_once(self, addr: str, *, lmq: bool = True) -> None:
        """One copy. The master's tables are decoded, compared and indexed on a thread
        (thousands of topics and groups take a while, and the loop serves on meanwhile)
        and taken on the loop."""
        ctx = self.ctx
        wrapper, differ, gone = await asyncio.to_thread(
            _copied_topics, ctx.topics, await self._read(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        marks = await self._deletion_marks(addr)  # read after the table: a topic gone
        # from it has its mark here (but for a mark the master's retention dropped)
        changed = False
        with ctx.topics.file.deferred():  # written once, on a thread, by topics_changed
            for tc in differ:
                changed |= ctx.topics.upsert(tc)
            deleted = [name for name in gone if ctx.topics.delete(name)]
        if marks:  # deleted where the master deleted them (on a thread: written to disk,
            # queues cut and written again, and the loop serves on meanwhile), the table
            # written first: a start that finishes a mark keeps it
            await asyncio.to_thread(ctx.topics.file.write_pending)
            batch_cq = ctx.topics.batch_cq
            for name in marks:  # the queue type of the topic created again, if it was
                ctx.store.set_batch_topic(name, name in batch_cq)
            for name in await asyncio.to_thread(ctx.store.adopt_topic_deletions, marks):
                log.info("topic %s deleted below commit-log offset %d, as on master %s",
                         name, marks[name], addr)
        if unmarked := [name for name in deleted if name not in marks]:
            # deleted on a master that sends no marks: their queues go, here and now
            await asyncio.to_thread(ctx.store.delete_topics, unmarked)
        if changed or deleted:
            ctx.topics_changed()
        await copy_mappings(ctx.client, addr, wrapper, ctx.logical, self.on_mapping)
        table = await asyncio.to_thread(
            _offset_table, await self._read(addr, RequestCode.GET_ALL_CONSUMER_OFFSET))
        for (group, topic, queue_id), offset in (await self._carry(addr, table)).items():
            table.setdefault(OffsetManager.key(topic, group), {})[queue_id] = offset
        differs, index = await asyncio.to_thread(_examine, ctx.offsets, table)
        ctx.offsets.take(table, index, differs=differs)
        # commits taken while the master's answers were awaited are noted, not carried
        # yet: they stay in the table until a later copy carries them
        for (group, topic, queue_id), offset in ctx.carried_offsets.pending().items():
            mine = ctx.offsets.query(group, topic, queue_id)
            if not topic.startswith(LMQ_PREFIX) and (mine is None or mine < offset):
                ctx.offsets.commit(group, topic, queue_id, offset)
        levels, checkpoint = parse_delay_progress(
            json.loads(await self._read(addr, RequestCode.GET_ALL_DELAY_OFFSET)))
        ctx.schedule.adopt_offsets(levels)
        if checkpoint is not None:  # absent from a Java master
            ctx.schedule.adopt_timer(checkpoint)
        groups, differs = await asyncio.to_thread(
            _copied_groups, ctx.subscription_groups,
            await self._read(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        ctx.subscription_groups.replace(groups, differs=differs)
        resp = await self.ctx.client.request(addr, RemotingCommand.request(
            RequestCode.GET_AUTH_METADATA), 10.0)
        if resp.code == ResponseCode.SUCCESS:
            if ctx.auth.replace(resp.full_body()):
                log.info("ACL 2.0 users and ACLs copied from master %s", addr)
        elif resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            raise TideMQError(f"GET_AUTH_METADATA: answer {resp.code} {resp.remark}")
        if lmq and ctx.store.lmq is not None:
            await self._lmq(addr)
        self.syncs += 1
        self.synced.set()

    async def _deletion_marks(self, addr: str) -> dict[str, int]:
        """The master's topic-deletion marks (GET_DELETED_TOPICS): per topic, the log
        offset its deletion began at; none from a master that does not serve them."""
        resp = await self.ctx.client.request(addr, RemotingCommand.request(
            RequestCode.GET_DELETED_TOPICS), 10.0)
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
            return {}  # a RocketMQ master, or an older TideMQ one
        if resp.code != ResponseCode.SUCCESS:
            raise TideMQError(f"GET_DELETED_TOPICS: answer {resp.code} {resp.remark}")
        return _marks(resp.full_body())

    async def _lmq_page(self, addr: str, kind: str, after: list[str] | None
                        ) -> bytes | None:
        ext = {"kind": kind}
        if after is not None:
            ext["afterLmq"] = after[0]
            if kind == "offsets":
                ext["afterGroup"] = after[1]
        resp = await self.ctx.client.request(addr, RemotingCommand.request(
            RequestCode.GET_LMQ_METADATA, ext), 10.0)
        if resp.code in (ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                         ResponseCode.SERVICE_NOT_AVAILABLE):
            return None  # an older master, or one without LMQ: nothing to copy
        if resp.code != ResponseCode.SUCCESS:
            raise TideMQError(f"GET_LMQ_METADATA: answer {resp.code} {resp.remark}")
        return resp.full_body()

    async def _lmq(self, addr: str) -> None:
        """Copy the master's LMQ tombstones, then its LMQ consumer offsets -- but for the
        ones this replica took while the master was down and the master holds lower or
        lacks, which are carried to the master instead (as :meth:`_carry`)."""
        store = self.ctx.store
        lmq = store.lmq
        assert lmq is not None
        carried = self.ctx.carried_offsets
        taken = {key: offset for key, offset in carried.pending().items()
                 if key[1].startswith(LMQ_PREFIX)}
        carry: dict[OffsetKey, int] = {}
        behind: dict[OffsetKey, int] = {}  # the master went further: nothing to carry
        for kind in ("tombstones", "offsets"):
            after: list[str] | None = None
            rows: list[tuple[str, str, int]] | list[tuple[str, int]]
            while True:
                body = await self._lmq_page(addr, kind, after)
                if body is None:
                    return
                if kind == "tombstones":
                    rows, later, more = await asyncio.to_thread(
                        _lmq_tombstones_to_take, lmq, body)
                    # on a thread: the log above the floors is read again for the
                    # entries of LMQs created again there, and the loop serves on
                    deleted = await asyncio.to_thread(
                        store.adopt_lmq_tombstones, later) if later else []
                    for name in deleted:
                        log.info("LMQ %s deleted, as on master %s", name, addr)
                else:  # the rows that can change anything, found on a thread
                    rows, differ, more = await asyncio.to_thread(
                        _lmq_offsets_to_take, lmq, body, taken.keys())
                    for name, group, offset in differ:
                        key = (group, name, 0)
                        mine = taken.pop(key, None)
                        if mine is not None and mine > offset:
                            carry[key] = mine
                        else:
                            if mine is not None:
                                behind[key] = mine
                            if lmq.committed_offset(group, name) != offset:
                                lmq.commit_offset(group, name, offset)
                if not more or not rows:
                    break
                after = [rows[-1][0], str(rows[-1][1])]
        carried.carried(behind)
        carry.update(taken)  # offsets the master has none of
        await self._send_offsets(addr, carry)

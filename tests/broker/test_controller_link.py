"""What a broker in controller mode does about what the controllers say: the pure
decision, and the link's own bookkeeping (its lease's start, a cut of its running log,
kept off the loop) with a real store and no controller reachable."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import pytest
from tests.tcp_proxy import Link

from tidemq.broker.config import BrokerConfig
from tidemq.broker.controller_link import (
    AskElection,
    Assignment,
    BecomeMaster,
    BecomeReplica,
    ControllerLink,
    next_step,
)
from tidemq.broker.replication.lease import MasterLease, lease_ms
from tidemq.broker.replication.role import BrokerRole, RoleHolder, RoleState
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.controller import EpochEntry as WireEpoch
from tidemq.codec.controller import EpochEntryCache, GetMetaDataResponseHeader
from tidemq.net import Connection, RemotingClient, RemotingServer
from tidemq.store import kept_cuts, truncation
from tidemq.store.append import MessageInput
from tidemq.store.epoch_file import EpochEntry
from tidemq.store.message_store import MessageStore

REPLICA = RoleState(BrokerRole.SLAVE, 2, "127.0.0.1:10912", 1)
MASTER = RoleState(BrokerRole.SYNC_MASTER, 0, "", 1)


def assignment(master: int | None, epoch: int, sync: set[int],
               ha: str | None = "127.0.0.1:10912") -> Assignment:
    addr = None if master is None else f"127.0.0.1:{10910 + master}"
    return Assignment(master, addr, ha if master is not None else None, epoch,
                      frozenset(sync), 1)


def test_the_elected_broker_becomes_master_of_the_new_epoch() -> None:
    assert next_step(2, REPLICA, assignment(2, 2, {2})) == BecomeMaster(2)
    assert next_step(2, RoleState(BrokerRole.SYNC_MASTER, 0, "", 2),
                     assignment(2, 2, {2})) is None


def test_a_fenced_master_becomes_a_replica_of_the_new_one() -> None:
    step = next_step(1, MASTER, assignment(2, 2, {2}, ha="127.0.0.1:10922"))
    assert step == BecomeReplica("127.0.0.1:10912", "127.0.0.1:10922", 2)


def test_a_replica_following_the_master_does_nothing() -> None:
    assert next_step(2, REPLICA, assignment(1, 1, {1, 2})) is None
    assert next_step(2, REPLICA, assignment(1, 2, {1})) == BecomeReplica(
        "127.0.0.1:10911", "127.0.0.1:10912", 2)


def test_without_master_only_members_of_the_set_ask_for_an_election() -> None:
    assert next_step(2, REPLICA, assignment(None, 0, set())) == AskElection()
    assert next_step(2, REPLICA, assignment(None, 3, {2})) == AskElection()
    assert next_step(3, REPLICA, assignment(None, 3, {2})) is None


def test_a_master_without_an_ha_address_is_not_followed_yet() -> None:
    assert next_step(2, REPLICA, assignment(1, 2, {1}, ha=None)) is None


def link_of(store: MessageStore) -> ControllerLink:
    config = BrokerConfig(enable_controller_mode=True, controller_addr="127.0.0.1:9",
                          broker_id=1, broker_heartbeat_interval=20,
                          controller_heart_beat_timeout_mills=3000)
    role = RoleHolder(RoleState(BrokerRole.SLAVE, 1, "", 1))
    return ControllerLink(RemotingClient(), config, store, role,
                          broker_addr=lambda: "127.0.0.1:10911",
                          ha_address=lambda: "127.0.0.1:10912",
                          lease=MasterLease(lease_ms(3000, 20)))


async def test_a_new_master_is_not_stepped_down_while_it_is_still_becoming_one(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeats go on while the parts of the broker take the master's role (the
    HA server starts, the replica's copy stops): the new master's first lease runs from
    when it was elected, not from when it was last master."""
    link = link_of(store)
    rounds = 0
    beaten = asyncio.Event()

    async def unanswered_round() -> None:  # the controllers have not confirmed it yet
        nonlocal rounds
        rounds += 1
        if rounds >= 5:
            beaten.set()

    monkeypatch.setattr(link, "heartbeat_round", unanswered_round)

    async def slow_part(state: RoleState) -> None:
        if state.is_master:
            await beaten.wait()  # several heartbeat rounds pass meanwhile

    link.role.add_listener(slow_part)
    beater = asyncio.get_running_loop().create_task(link._beat_forever())
    try:
        await link._become_master(2)
        assert link.role.state.is_master and link.role.state.epoch == 2
    finally:
        beater.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beater


@contextlib.asynccontextmanager
async def fake_controller(leader: str | None) -> AsyncIterator[RemotingServer]:
    """A controller answering GET_METADATA_INFO: the leader when ``leader`` is ``None``,
    else a follower naming ``leader`` as the leader's address."""
    server = RemotingServer("127.0.0.1", 0)

    async def metadata(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetMetaDataResponseHeader(is_leader=leader is None,
                                           controller_leader_address=leader)
        return cmd.response(ext_fields=header.to_ext())

    server.register(RequestCode.CONTROLLER_GET_METADATA_INFO, metadata)
    await server.start()
    try:
        yield server
    finally:
        await server.close(drain_timeout=0.05)


async def test_the_leader_is_reached_at_the_address_the_broker_was_given(
        store: MessageStore) -> None:
    """The broker lists the controllers behind proxies; a follower names the leader at
    the address the leader knows itself by. The broker talks to the leader through the
    proxy it was given, so cutting the proxies cuts it off (the partition tests' premise,
    and any deployment that reaches its controllers through a mapping)."""
    async with fake_controller(None) as leader:
        proxy = await Link(leader.address).start()
        try:
            async with fake_controller(leader.address) as follower:
                config = BrokerConfig(enable_controller_mode=True, broker_id=1,
                                      controller_addr=f"{follower.address};{proxy.addr}")
                client = RemotingClient()
                try:
                    link = ControllerLink(client, config, store,
                                          RoleHolder(RoleState(BrokerRole.SLAVE, 1, "", 1)),
                                          broker_addr=lambda: "127.0.0.1:10911",
                                          ha_address=lambda: "127.0.0.1:10912")
                    assert await link._find_leader() == proxy.addr
                finally:
                    await client.close()
        finally:
            await proxy.close()


async def test_a_replica_told_of_its_master_early_takes_the_new_epoch_without_a_cut(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controllers may name the new master to a replica before that broker has
    recorded its epoch: the replica takes the master's epochs as they are then (the
    old epoch only), copies what the master writes in the new one, and takes the new
    epoch at a later round. What it copied meanwhile is the master's: no cut is
    requested, and the replica follows the master's epoch (it counts as in sync)."""
    store.epochs.append(1, 0)
    for i in range(3):
        store.put("T", 0, MessageInput(b"old-%d" % i))
    elected_at = store.commitlog.max_offset
    caches = [EpochEntryCache(broker_id=2, epoch_list=[WireEpoch(1, 0)],
                              max_offset=elected_at)]

    async def master_epochs(address: str) -> EpochEntryCache:
        return caches[-1]

    link = link_of(store)
    monkeypatch.setattr(link, "_epoch_cache", master_epochs)
    await link._become_replica(BecomeReplica("127.0.0.1:10912", "127.0.0.1:10922", 2))
    for i in range(3):  # copied from the new master, in its epoch
        store.put("T", 0, MessageInput(b"new-%d" % i))
    caches.append(EpochEntryCache(broker_id=2, epoch_list=[WireEpoch(1, 0),
                                                           WireEpoch(2, elected_at)],
                                  max_offset=store.commitlog.max_offset))
    await link._follow_epochs(assignment(2, 2, {2}))
    assert truncation.pending(store.layout) is None
    assert store.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, elected_at)]


async def test_a_replica_whose_log_went_past_where_the_master_settled_cuts_it(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Named early, the replica held more than the new master kept once it settled its
    log and recorded its epoch: the part before the copy began diverged, so it is cut
    in the running store and the replica follows the master's epochs from there."""
    store.epochs.append(1, 0)
    ends = []
    for i in range(3):
        store.put("T", 0, MessageInput(b"old-%d" % i))
        ends.append(store.commitlog.max_offset)
    caches = [EpochEntryCache(broker_id=2, epoch_list=[WireEpoch(1, 0)],
                              max_offset=ends[-1])]

    async def master_epochs(address: str) -> EpochEntryCache:
        return caches[-1]

    link = link_of(store)
    monkeypatch.setattr(link, "_epoch_cache", master_epochs)
    await link._become_replica(BecomeReplica("127.0.0.1:10912", "127.0.0.1:10922", 2))
    assert store.commitlog.max_offset == ends[-1]  # nothing to cut yet
    store.replica = True  # as the broker's replication service sets it for a replica
    settled = ends[1]  # the master kept two of the three records
    caches.append(EpochEntryCache(broker_id=2, epoch_list=[WireEpoch(1, 0),
                                                           WireEpoch(2, settled)],
                                  max_offset=settled))
    await link._follow_epochs(assignment(2, 2, {2}))
    assert store.commitlog.max_offset == settled
    assert truncation.pending(store.layout) is None
    assert store.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, settled)]
    state = link.role.state  # copying the master again, from the cut
    assert not state.is_master and state.master_ha_address == "127.0.0.1:10912"


async def test_a_replica_restarted_level_with_its_master_is_not_said_to_diverge(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Before its store starts, a broker cannot tell how far its log goes: a replica
    restarted with the master's epochs and log was told, at WARNING, that its log
    diverged and its tail was cut, on every restart, though nothing was."""
    store.epochs.append(1, 0)
    for i in range(3):
        store.put("T", 0, MessageInput(b"m-%d" % i))
    end = store.commitlog.max_offset

    async def registered() -> bool:
        return True

    async def named() -> Assignment:
        return assignment(2, 1, {1, 2})

    async def master_epochs(address: str) -> EpochEntryCache:
        return EpochEntryCache(broker_id=2, epoch_list=[WireEpoch(1, 0)], max_offset=end)

    link = link_of(store)
    monkeypatch.setattr(link, "_register", registered)
    monkeypatch.setattr(link, "fetch_assignment", named)
    monkeypatch.setattr(link, "_epoch_cache", master_epochs)
    with caplog.at_level("INFO", logger="tidemq.broker.controller_link"):
        await link.prepare()
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert "diverged" not in caplog.text
    assert truncation.pending(store.layout) in (None, end)  # nothing of the log is cut


async def test_the_loop_serves_while_a_running_cut_keeps_its_tail(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica told to follow a master its log went past keeps the tail before cutting
    it. The copy is held at its first record (a fault-injection hook) until a request to
    a server on the broker's loop is answered: the loop serves meanwhile, the store
    refuses every append, and the cut is made once the tail is kept."""
    store.epochs.append(1, 0)
    for i in range(200):
        store.put("T", i % 4, MessageInput(b"tail-%d" % i * 20))
    settled = _record_end(store, 20)
    end = store.commitlog.max_offset
    store.replica = True

    async def master_epochs(address: str) -> EpochEntryCache:
        return EpochEntryCache(broker_id=2, epoch_list=[WireEpoch(1, 0), WireEpoch(2, settled)],
                               max_offset=settled)

    keeping, release = threading.Event(), threading.Event()
    released: list[bool] = []
    keep = kept_cuts.keep

    def held_keep(*args: object, **kwargs: object) -> kept_cuts.CutKept:
        keeping.set()
        released.append(release.wait(20))  # False: nothing ran on the loop meanwhile
        return keep(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(kept_cuts, "keep", held_keep)
    server = RemotingServer("127.0.0.1", 0)

    async def answer(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response()

    server.register(RequestCode.HEART_BEAT, answer)
    await server.start()
    client = RemotingClient()
    link = link_of(store)
    monkeypatch.setattr(link, "_epoch_cache", master_epochs)
    try:
        following = asyncio.create_task(
            link._become_replica(BecomeReplica("127.0.0.1:10912", "127.0.0.1:10922", 2)))
        assert await asyncio.to_thread(keeping.wait, 20)
        response = await client.request(server.address,
                                        RemotingCommand.request(RequestCode.HEART_BEAT), 20)
        assert response.code == 0
        assert not following.done()  # answered while the tail is being kept
        with pytest.raises(truncation.CutUnderWay, match=f"cut at {settled}"):
            store.append_replicated(end, b"\0" * 8)
        with pytest.raises(truncation.CutUnderWay):
            store.copy_started()
        with pytest.raises(truncation.CutUnderWay):
            store.replica = False
        release.set()
        await asyncio.wait_for(following, 20)
    finally:
        release.set()
        await client.close()
        await server.close(drain_timeout=0.05)
    assert released == [True]
    assert store.commitlog.max_offset == settled
    assert truncation.pending(store.layout) is None
    [cut] = kept_cuts.kept_cuts(store.layout.truncated_dir)
    assert (cut.from_offset, cut.size) == (settled, end - settled)
    assert link.role.state.master_ha_address == "127.0.0.1:10922"  # copies from the cut


def _record_end(store: MessageStore, n: int) -> int:
    """Where the ``n``-th record of the log ends."""
    from tidemq.store.log_scan import End, walk

    for i, step in enumerate(walk(store.commitlog.segments, 0)):
        assert not isinstance(step, End)
        assert isinstance(step, tuple)
        if i == n - 1:
            return step[0] + step[1].total_size
    raise AssertionError(n)

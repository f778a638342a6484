"""The sync-state sets a master without its lease must hear from: every set the
controllers may hold."""

from __future__ import annotations

from tidemq.broker.replication.followers import SyncStateSetFollowers
from tidemq.broker.replication.lease import MasterLease
from tidemq.broker.replication.role import BrokerRole, RoleHolder, RoleState
from tidemq.broker.replication.standing import QuorumLossMode, Standing
from tidemq.codec.controller import EpochEntry, EpochEntryCache


async def _no_cache(_address: str) -> EpochEntryCache | None:
    return None


def followers(epoch: int) -> SyncStateSetFollowers:
    role = RoleHolder(RoleState(BrokerRole.SYNC_MASTER, 0, "", epoch))
    standing = Standing(MasterLease(1000), QuorumLossMode.SYNC_STATE_SET_FOLLOWS)
    return SyncStateSetFollowers(1, role, standing, lambda: 0, _no_cache, 0.1)


def test_every_set_the_controllers_may_hold_is_required() -> None:
    f = followers(epoch=2)
    assert f.possible() is None  # nothing known for this epoch yet
    f.answered(2, 5, frozenset({1, 2}))
    assert f.possible() == {1, 2}
    f.asked(5, frozenset({1, 3}))  # asked, outcome unknown
    assert f.possible() == {1, 2, 3}
    f.answered(2, 6, frozenset({1, 3}))  # a change based on set epoch 5 is settled
    assert f.possible() == {1, 3}
    f.asked(6, frozenset({1}))
    f.refused(6)
    assert f.possible() == {1, 3}


def test_a_set_of_another_master_epoch_says_nothing() -> None:
    f = followers(epoch=3)
    f.answered(2, 5, frozenset({1, 2}))
    assert f.possible() is None


async def test_a_round_confirms_only_when_every_member_follows_this_epoch() -> None:
    caches = {"b2": (2, 500), "b3": (2, 700)}

    async def epoch_cache(address: str) -> EpochEntryCache | None:
        if address not in caches:
            return None  # unreachable
        epoch, end = caches[address]
        return EpochEntryCache(epoch_list=[EpochEntry(epoch=1, start_offset=0),
                                           EpochEntry(epoch=epoch, start_offset=100)],
                               max_offset=end)

    role = RoleHolder(RoleState(BrokerRole.SYNC_MASTER, 0, "", 2))
    standing = Standing(MasterLease(1000), QuorumLossMode.SYNC_STATE_SET_FOLLOWS)
    standing.reset(2)
    f = SyncStateSetFollowers(1, role, standing, lambda: 900, epoch_cache, 0.1)
    f.addresses.update({2: "b2", 3: "b3"})
    f.answered(2, 4, frozenset({1, 2, 3}))
    await f.confirm()
    assert standing.confirmed == 0  # the controllers never confirmed this epoch's lease
    f.leased_epoch = 2
    await f.confirm()
    assert standing.confirmed == 500  # what both hold
    caches["b3"] = (3, 800)  # elected: it follows no one any more
    caches["b2"] = (2, 800)
    await f.confirm()
    assert standing.confirmed == 500
    caches["b3"] = (2, 800)
    del caches["b2"]  # gone
    await f.confirm()
    assert standing.confirmed == 500

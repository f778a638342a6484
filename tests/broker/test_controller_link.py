"""What a broker in controller mode does about what the controllers say (pure part)."""

from __future__ import annotations

from tidemq.broker.controller_link import (
    AskElection,
    Assignment,
    BecomeMaster,
    BecomeReplica,
    next_step,
)
from tidemq.broker.replication.role import BrokerRole, RoleState

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

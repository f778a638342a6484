"""A controller-mode master's lease: which heartbeat answers renew it, and for how long."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.replication.lease import HeartbeatAnswer, MasterLease, lease_ms, renews

LEADER = HeartbeatAnswer("n0", True, master_id=1, master_epoch=3)
FOLLOWER = HeartbeatAnswer("n0", False)


def test_a_majority_naming_the_leader_that_confirms_the_master_renews() -> None:
    assert renews([LEADER, FOLLOWER], 3, me=1, epoch=3)
    assert renews([FOLLOWER, LEADER, FOLLOWER], 3, me=1, epoch=3)


def test_no_majority_no_renewal() -> None:
    assert not renews([LEADER], 3, me=1, epoch=3)
    assert not renews([LEADER, FOLLOWER], 4, me=1, epoch=3)
    assert not renews([], 3, me=1, epoch=3)


def test_the_leader_must_be_among_the_answers() -> None:
    assert not renews([FOLLOWER, FOLLOWER], 3, me=1, epoch=3)


def test_answers_naming_another_leader_or_none_do_not_renew() -> None:
    # a stale leader still answering while a majority already follows another
    assert not renews([LEADER, HeartbeatAnswer("n2", False)], 3, me=1, epoch=3)
    assert not renews([LEADER, HeartbeatAnswer(None, False)], 3, me=1, epoch=3)


def test_the_leader_must_name_this_broker_master_of_its_epoch() -> None:
    other = HeartbeatAnswer("n0", True, master_id=2, master_epoch=4)
    assert not renews([other, FOLLOWER], 3, me=1, epoch=3)
    newer = HeartbeatAnswer("n0", True, master_id=1, master_epoch=4)
    assert not renews([newer, FOLLOWER], 3, me=1, epoch=3)
    assert not renews([HeartbeatAnswer("n0", True), FOLLOWER], 3, me=1, epoch=3)


@given(st.lists(st.tuples(st.sampled_from(["n0", "n1", "n2", None]), st.booleans()),
                min_size=0, max_size=3))
def test_two_majorities_renewing_name_one_leader(views: list[tuple[str | None, bool]]) -> None:
    """Any majority that renews shares a controller with any other, so both name the
    same leader: a renewal always names the leader a majority follows."""
    answers = [HeartbeatAnswer(leader, leading and leader is not None, 1, 3)
               for leader, leading in views]
    if renews(answers, 3, me=1, epoch=3):
        assert len({a.leader_id for a in answers}) == 1
        assert sum(a.is_leader for a in answers) == 1


def test_the_lease_runs_from_when_the_round_was_sent() -> None:
    now = [100.0]
    lease = MasterLease(900, clock=lambda: now[0])
    assert not lease.holds()  # never renewed
    lease.renew(sent_at=99.5)
    assert lease.holds() and abs(lease.remaining() - 0.4) < 1e-9
    lease.renew(sent_at=99.0)  # a late answer to an older round takes nothing back
    assert lease.until == 99.5 + 0.9
    now[0] = 100.4
    assert not lease.holds() and lease.remaining() == 0.0
    lease.renew(sent_at=100.3)
    assert lease.holds()
    lease.revoke()
    assert not lease.holds()


def test_the_lease_is_the_timeout_less_two_intervals() -> None:
    assert lease_ms(3000, 500) == 2000
    assert lease_ms(1500, 300) == 900

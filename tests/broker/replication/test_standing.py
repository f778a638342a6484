"""What lets a controller-mode master acknowledge: its lease, else (when configured) what
every member of its sync-state set confirmed it holds while following it."""

from __future__ import annotations

import pytest

from tidemq.broker.config import load_broker_config
from tidemq.broker.replication.lease import MasterLease
from tidemq.broker.replication.standing import NO_LIMIT, QuorumLossMode, Standing
from tidemq.errors import ConfigError

FOLLOWS = QuorumLossMode.SYNC_STATE_SET_FOLLOWS


def standing(mode: QuorumLossMode) -> tuple[Standing, list[float]]:
    now = [100.0]
    lease = MasterLease(1000, clock=lambda: now[0])
    s = Standing(lease, mode)
    s.reset(3)
    lease.renew(sent_at=100.0)
    return s, now


def test_under_its_lease_a_master_acknowledges_anything_in_either_mode() -> None:
    for mode in QuorumLossMode:
        s, _ = standing(mode)
        assert s.may_take() and s.acknowledges(10**12) and s.limit() == NO_LIMIT


def test_step_down_acknowledges_nothing_once_the_lease_lapsed() -> None:
    s, now = standing(QuorumLossMode.STEP_DOWN)
    s.confirm(3, [500, 700], sent_at=100.5, own_end=900)  # ignored in this mode
    now[0] = 101.0
    assert not s.may_take() and not s.acknowledges(1)


def test_without_its_lease_it_acknowledges_what_every_member_holds() -> None:
    s, now = standing(FOLLOWS)
    now[0] = 101.0  # lapsed, and nothing confirmed yet
    assert not s.may_take() and not s.acknowledges(1) and s.limit() == 0
    s.confirm(3, [500, 700], sent_at=100.9, own_end=900)
    assert s.may_take()
    assert s.limit() == 500 and s.acknowledges(500) and not s.acknowledges(501)
    s.confirm(3, [400, 800], sent_at=101.0, own_end=900)  # never goes back
    assert s.limit() == 500
    now[0] = 102.0  # no round confirmed for a lease: it must step down
    assert not s.may_take()


def test_confirmations_of_another_epoch_count_for_nothing() -> None:
    s, now = standing(FOLLOWS)
    now[0] = 101.0
    s.confirm(2, [500], sent_at=101.0, own_end=900)
    assert not s.may_take() and not s.acknowledges(1)
    s.confirm(3, [500], sent_at=101.0, own_end=900)
    s.reset(4)  # master again, of a newer epoch
    assert not s.may_take() and not s.acknowledges(1)


def test_a_master_alone_in_its_sync_state_set_vouches_for_its_own_log() -> None:
    s, now = standing(FOLLOWS)
    now[0] = 101.0
    s.confirm(3, [], sent_at=101.0, own_end=900)
    assert s.acknowledges(900) and not s.acknowledges(901)


def test_a_confirmation_that_advances_wakes_the_waiting_sends() -> None:
    s, _ = standing(FOLLOWS)
    woken: list[int] = []
    s.on_confirmed.append(lambda: woken.append(s.confirmed))
    s.confirm(3, [500], sent_at=100.0, own_end=900)
    s.confirm(3, [500], sent_at=100.1, own_end=900)
    assert woken == [500]


def test_the_key_is_read_and_checked() -> None:
    base = {"enableControllerMode": "true", "controllerAddr": "127.0.0.1:9878",
            "brokerId": "1", "masterWithoutControllerQuorum": "SYNC_STATE_SET_FOLLOWS"}
    broker, _, _ = load_broker_config(env={}, overrides={**base, "brokerRole": "SYNC_MASTER"})
    assert broker.master_without_controller_quorum is FOLLOWS
    default, _, _ = load_broker_config(env={})
    assert default.master_without_controller_quorum is QuorumLossMode.STEP_DOWN
    with pytest.raises(ConfigError, match="needs brokerRole=SYNC_MASTER") as exc:
        load_broker_config(env={}, overrides=base)
    assert exc.value.key == "masterWithoutControllerQuorum"
    with pytest.raises(ConfigError, match="controller mode only"):
        load_broker_config(env={}, overrides={"masterWithoutControllerQuorum":
                                              "SYNC_STATE_SET_FOLLOWS"})
    with pytest.raises(ConfigError, match="masterWithoutControllerQuorum"):
        load_broker_config(env={}, overrides={**base, "masterWithoutControllerQuorum":
                                              "KEEP_GOING"})

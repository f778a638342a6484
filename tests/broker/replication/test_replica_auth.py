"""The master's check of a replica's authentication frame, against a real
``plain_acl.yml`` (ACL 1.0) and a real store of users (ACL 2.0), on a clock the test
moves: the edges of the timestamp window, replays within it and after it, the broker's
own key, disabled users, trusted addresses, and a master without ACL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.net.acl.accounts import ADMIN, USER, write_accounts

from tidemq.broker.auth_store import AuthStore
from tidemq.broker.replication.replica_auth import (
    CLOCK_WINDOW_MS,
    Admitted,
    HaRefusal,
    ReplicaAuth,
)
from tidemq.codec.ha_auth import AuthFrame, OpeningDecoder, encode_auth
from tidemq.codec.signature import Credentials, SigningKey
from tidemq.net.acl.accounts import AclFile
from tidemq.net.acl.policy import User, UserType
from tidemq.net.acl.users import UserDirectory

NOW_MS = 1_700_000_000_000
REMOTE = "127.0.0.1:40000"


class Clock:
    def __init__(self) -> None:
        self.ms = NOW_MS

    def __call__(self) -> float:
        return self.ms / 1000


def frame(creds: Credentials, *, at: int = NOW_MS, group: str = "broker-a") -> AuthFrame:
    wire = encode_auth(creds.access_key, SigningKey(creds.secret_key), timestamp_ms=at,
                       nonce=os.urandom(8), broker_name=group, broker_id=1)
    opened = OpeningDecoder().receive(wire)
    assert opened is not None and opened.frame is not None
    return opened.frame


def refusal(auth: ReplicaAuth, got: AuthFrame | None, remote: str = REMOTE) -> str:
    with pytest.raises(HaRefusal) as caught:
        auth.admit(got, remote)
    return caught.value.reason


@pytest.fixture
def acl1(tmp_path: Path) -> tuple[ReplicaAuth, Clock]:
    clock = Clock()
    path = write_accounts(tmp_path)
    path.write_text(path.read_text().replace("accounts:", "globalWhiteRemoteAddresses:\n"
                                             "  - 10.1.1.*\naccounts:"))
    return ReplicaAuth(AclFile(path), own=("broker", "broker-secret"),
                       allow_unauthenticated=False, clock=clock), clock


@pytest.fixture
def acl2(tmp_path: Path) -> ReplicaAuth:
    store = AuthStore(tmp_path)
    store.create_user(User("root", "root-secret", UserType.SUPER))
    store.create_user(User("alice", "alice-secret"))
    store.create_user(User("inner", "inner-secret"))
    store.create_user(User("off", "off-secret", UserType.SUPER, enabled=False))
    directory = UserDirectory(store, authorize=True, cluster="DefaultCluster")
    return ReplicaAuth(directory, own=("inner", "inner-secret"), allow_unauthenticated=False,
                       clock=Clock())


def test_acl1_admin_and_own_key(acl1: tuple[ReplicaAuth, Clock]) -> None:
    auth, _ = acl1
    assert auth.admit(frame(ADMIN), REMOTE) == Admitted(True, "admin", "broker-a", 1)
    # the broker's own key is admitted without an account of that name
    assert auth.admit(frame(Credentials("broker", "broker-secret")), REMOTE) == Admitted(
        True, "broker", "broker-a", 1)
    assert refusal(auth, frame(Credentials("broker", "guess"))) == "signature"
    assert refusal(auth, frame(USER)) == "admin"
    assert refusal(auth, frame(Credentials("nobody", "x"))) == "account"
    assert refusal(auth, None) == "unauthenticated"
    # a globally trusted address needs no frame; a frame from it is still checked
    assert auth.admit(None, "10.1.1.7:5000") == Admitted(False)
    assert refusal(auth, frame(USER), "10.1.1.7:5000") == "admin"
    assert auth.refused == {"signature": 1, "admin": 2, "account": 1, "unauthenticated": 1}


def test_acl2_super_user_and_inner_credentials(acl2: ReplicaAuth) -> None:
    assert acl2.admit(frame(Credentials("root", "root-secret")), REMOTE).authenticated
    # inner credentials: admitted though a Normal user without cluster rights
    assert acl2.admit(frame(Credentials("inner", "inner-secret")), REMOTE).authenticated
    assert refusal(acl2, frame(Credentials("alice", "alice-secret"))) == "admin"
    assert refusal(acl2, frame(Credentials("off", "off-secret"))) == "account"


@pytest.fixture(scope="module")
def accounts(tmp_path_factory: pytest.TempPathFactory) -> AclFile:
    return AclFile(write_accounts(tmp_path_factory.mktemp("acl")))


@given(skew=st.integers(-2 * CLOCK_WINDOW_MS, 2 * CLOCK_WINDOW_MS))
def test_the_timestamp_window(accounts: AclFile, skew: int) -> None:
    auth = ReplicaAuth(accounts, own=None, allow_unauthenticated=False, clock=Clock())
    got = frame(ADMIN, at=NOW_MS + skew)
    if abs(skew) <= CLOCK_WINDOW_MS:
        assert auth.admit(got, REMOTE).authenticated
    else:
        assert refusal(auth, got) == "timestamp"


def test_a_frame_is_admitted_once(acl1: tuple[ReplicaAuth, Clock]) -> None:
    auth, clock = acl1
    got = frame(ADMIN)
    auth.admit(got, REMOTE)
    assert auth.remembered == 1
    assert refusal(auth, got) == "replay"
    clock.ms += CLOCK_WINDOW_MS + 1  # past the window: stale rather than replayed
    assert refusal(auth, got) == "timestamp"
    clock.ms += CLOCK_WINDOW_MS
    assert refusal(auth, got) == "timestamp"
    assert auth.remembered == 0  # forgotten once no frame of its time could pass


def test_allow_unauthenticated_still_checks_a_frame(tmp_path: Path) -> None:
    auth = ReplicaAuth(AclFile(write_accounts(tmp_path)), own=None,
                       allow_unauthenticated=True)
    assert auth.admit(None, REMOTE) == Admitted(False)
    assert refusal(auth, frame(Credentials("admin", "wrong"))) == "signature"


def test_without_acl_every_replica_is_served_and_nothing_is_checked() -> None:
    auth = ReplicaAuth(None, own=None, allow_unauthenticated=False)
    assert not auth.required
    assert auth.admit(None, REMOTE) == Admitted(False)
    assert auth.admit(frame(Credentials("anyone", "wrong")), REMOTE) == Admitted(False)
    assert not auth.refused


@pytest.mark.parametrize("acl", [True, False], ids=["acl", "no-acl"])
def test_a_frame_naming_another_group_is_refused(tmp_path: Path, acl: bool) -> None:
    """A replica whose haMasterAddress names another group's master would copy (and
    later serve) that group's log: refused with or without ACL, by the name it signs."""
    auth = ReplicaAuth(AclFile(write_accounts(tmp_path)) if acl else None, own=None,
                       allow_unauthenticated=False, group="broker-a", clock=Clock())
    assert refusal(auth, frame(ADMIN, group="broker-b")) == "group"
    assert auth.admit(frame(ADMIN), REMOTE).authenticated == acl
    assert auth.refused == {"group": 1}

"""The broker's ACL 2.0 store on real files: what it writes reads back, a write that
fails changes nothing, and a damaged file stops the start naming the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemq.broker import auth_store
from tidemq.broker.auth_store import AuthStore
from tidemq.codec.auth_bodies import AclInfo, PolicyEntryInfo, PolicyInfo
from tidemq.errors import BrokerResponseError, ConfigError, ResponseCode
from tidemq.net.acl.policy import User, UserType

ACL = AclInfo(policies=[PolicyInfo(entries=[PolicyEntryInfo(
    resource="Topic:t-*", actions=["Pub"], decision="Allow")])])


def test_what_is_written_reads_back(tmp_path: Path) -> None:
    store = AuthStore(tmp_path / "config")
    store.create_user(User("u1", "secret1"))
    assert store.ensure_user(User("root", "secret2", UserType.SUPER))
    assert not store.ensure_user(User("root", "other-pass"))
    store.put_acl("User:u1", ACL, create=True)
    again = AuthStore(tmp_path / "config")
    again.load()
    assert again.user("root") == User("root", "secret2", UserType.SUPER)
    assert again.acl_of("u1") == store.acl_of("u1")
    assert json.loads((tmp_path / "config" / "users.json").read_text())[0] == {
        "password": "secret2", "userStatus": "enable", "userType": "Super",
        "username": "root"}
    again.delete_user("u1")
    assert (again.user("u1"), again.acl_of("u1")) == (None, None)
    with pytest.raises(BrokerResponseError) as info:
        again.put_acl("User:u1", ACL, create=True)
    assert info.value.code == ResponseCode.INVALID_PARAMETER


def test_the_store_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_store, "MAX_USERS", 1)
    monkeypatch.setattr(auth_store, "MAX_ENTRIES", 1)
    store = AuthStore(tmp_path)
    store.create_user(User("u1", "secret1"))
    with pytest.raises(BrokerResponseError, match="holds 1 users already"):
        store.create_user(User("u2", "secret2"))
    store.put_acl("User:u1", ACL, create=True)
    more = AclInfo(policies=[PolicyInfo(entries=[PolicyEntryInfo(
        resource="Topic:other", actions=["Sub"], decision="Allow")])])
    with pytest.raises(BrokerResponseError, match="at most 1"):
        store.put_acl("User:u1", more, create=False)
    acl = store.acl_of("u1")
    assert acl is not None and len(acl.entries) == 1


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = AuthStore(blocker / "config")  # its directory cannot be made
    with pytest.raises(OSError):
        store.create_user(User("u1", "secret1"))
    assert store.user("u1") is None


def test_a_damaged_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "users.json").write_text('[{"username": "u", "password": "1"}]')
    with pytest.raises(ConfigError) as info:
        AuthStore(tmp_path).load()
    assert info.value.key == "authenticationEnabled"
    assert "password must be at least 6 characters" in str(info.value)
    (tmp_path / "users.json").write_text("not json")
    with pytest.raises(ConfigError):
        AuthStore(tmp_path).load()

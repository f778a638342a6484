"""The console users file: parsing with clear errors, atomic edits, reload on change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemq.console.passwords import PasswordHash
from tidemq.console.users import (
    Role,
    UsersFile,
    UsersFileError,
    dump_users,
    edit_users_file,
    parse_users,
)

CHEAP = (10, 1, 1)
HASH = "$scrypt$ln=10,r=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43


@pytest.mark.parametrize(("text", "reason"), [
    ("users: {a: 1}", "a list under 'users'"),
    ("- a", "a list under 'users'"),
    ("users: [1]", r"users\[0\] is not a mapping"),
    ("users: [{name: 'a b', role: admin, passwordHash: x}]", "name must be"),
    (f"users: [{{name: a, role: root, passwordHash: '{HASH}'}}]", "role must be admin or viewer"),
    ("users: [{name: a, role: admin}]", "has no passwordHash"),
    ("users: [{name: a, role: admin, passwordHash: plain}]", "not a console password hash"),
    (f"users: [{{name: a, role: admin, passwordHash: '{HASH}'}}, "
     f"{{name: a, role: viewer, passwordHash: '{HASH}'}}]", "listed twice"),
    ("users: [", "not YAML"),
])
def test_bad_files_say_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(UsersFileError, match=reason) as info:
        parse_users(text, "u.yml")
    assert info.value.key == "consoleUsersFile" and "u.yml" in str(info.value)


def test_edit_add_change_remove(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "users.yml"
    alice = edit_users_file(path, "alice", role=Role.ADMIN, password="pw-a", cost=CHEAP)
    assert alice is not None and alice.role is Role.ADMIN
    edit_users_file(path, "bob", role=Role.VIEWER, password="pw-b", cost=CHEAP)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    users = UsersFile(path)
    assert users.names() == ["alice", "bob"]
    assert users.authenticate("alice", "pw-a") == alice
    assert users.authenticate("alice", "pw-b") is None
    assert users.authenticate("nobody", "pw-a") is None
    changed = edit_users_file(path, "alice", password="new", cost=CHEAP)
    assert changed is not None and changed.credential != alice.credential
    assert changed.role is Role.ADMIN
    edit_users_file(path, "bob", remove=True)
    assert parse_users(path.read_text()).keys() == {"alice"}
    with pytest.raises(UsersFileError, match="no user named 'bob'"):
        edit_users_file(path, "bob", remove=True)
    with pytest.raises(UsersFileError, match="add needs a role and a password"):
        edit_users_file(path, "carol", password="x")
    assert [p.name for p in path.parent.iterdir()] == ["users.yml"]  # no temporary left


def test_the_file_is_read_again_when_it_changes_and_a_broken_one_keeps_the_old(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "users.yml"
    edit_users_file(path, "alice", role=Role.ADMIN, password="pw", cost=CHEAP)
    users = UsersFile(path)
    edit_users_file(path, "alice", role=Role.VIEWER, password="pw", cost=CHEAP)
    _touch_later(path)
    alice = users.lookup("alice")
    assert alice is not None and alice.role is Role.VIEWER
    path.write_text("users: [")
    _touch_later(path)
    assert users.lookup("alice") == alice
    assert "the users read before stay" in caplog.text


def test_a_file_renamed_into_place_with_the_same_size_and_time_is_read_again(
        tmp_path: Path) -> None:
    path = tmp_path / "users.yml"
    edit_users_file(path, "alice", role=Role.ADMIN, password="pw", cost=CHEAP)
    users = UsersFile(path)
    assert (alice := users.lookup("alice")) is not None and alice.role is Role.ADMIN
    before = path.stat()
    other = tmp_path / "next.yml"
    other.write_text(path.read_text("utf-8").replace("alice", "alicf"), "utf-8")
    assert other.stat().st_size == before.st_size
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, path)
    assert users.lookup("alice") is None
    assert users.lookup("alicf") is not None


def test_a_missing_or_broken_file_stops_the_start(tmp_path: Path) -> None:
    with pytest.raises(UsersFileError, match="No such file"):
        UsersFile(tmp_path / "missing.yml")
    (tmp_path / "bad.yml").write_text("users: 3")
    with pytest.raises(UsersFileError, match="a list under 'users'"):
        UsersFile(tmp_path / "bad.yml")


def _touch_later(path: Path) -> None:
    """Move the modification time on, as a later edit would (the clock may not have)."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000))


_names = st.text(st.characters(codec="utf-8", exclude_categories=("Zs", "Zl", "Zp", "Cc",
                                                                   "Cs", "Co", "Cn", "Cf")),
                 min_size=1, max_size=20).filter(lambda n: n.isprintable())
_hashes = st.builds(lambda salt, digest: PasswordHash(10, 1, 1, salt, digest).encode(),
                    st.binary(min_size=16, max_size=32), st.binary(min_size=32, max_size=32))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_names, st.tuples(st.sampled_from(Role), _hashes), max_size=6))
def test_the_file_format_round_trips(users: dict[str, tuple[Role, str]]) -> None:
    assert parse_users(dump_users(users)) == users

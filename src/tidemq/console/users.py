"""Who may log in to the console: :class:`UserDirectory`, the one interface the login
uses, and :class:`UsersFile`, the directory kept in a YAML file.

The users file (written by ``tidemq console user add``; hand edits are fine)::

    users:
      - name: alice
        role: admin            # admin: may change things; viewer: read-only
        passwordHash: $scrypt$ln=15,r=8,p=1$...$...

Another source of users (the broker's ACL users, say) plugs in by implementing
:class:`UserDirectory`: look a user up by name, and check a password.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Protocol

import yaml

from tidemq.console.passwords import PasswordHash, PasswordHashError, hash_password
from tidemq.errors import ConfigError

__all__ = ["ConsoleUser", "Role", "UserDirectory", "UsersFile", "UsersFileError",
           "dump_users", "edit_users_file", "parse_users"]

log = logging.getLogger(__name__)

#: Longest user name accepted.
MAX_NAME = 64


class Role(enum.Enum):
    ADMIN = "admin"
    VIEWER = "viewer"


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleUser:
    name: str
    role: Role
    #: Changes when the user's password changes: sessions opened with an older
    #: password end.
    credential: str = ""

    @property
    def may_change(self) -> bool:
        return self.role is Role.ADMIN


class UserDirectory(Protocol):
    """Where console users come from."""

    def lookup(self, name: str) -> ConsoleUser | None:
        """The user named ``name`` as it is now (role, credential), or None."""

    def authenticate(self, name: str, password: str) -> ConsoleUser | None:
        """The user when ``password`` is theirs, else None. May be slow (a KDF): the
        console calls it off the event loop."""


class UsersFileError(ConfigError):
    """A users file that cannot be used; ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"console users file {path}: {reason}", key="consoleUsersFile")
        self.path = path
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    user: ConsoleUser
    hashed: PasswordHash


def parse_users(text: str, path: str = "<users>") -> dict[str, tuple[Role, str]]:
    """Name -> (role, password hash) from the YAML text of a users file."""
    try:
        doc: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsersFileError(path, f"not YAML: {exc}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict) or not isinstance(doc.get("users", []), list):
        raise UsersFileError(path, "expected a mapping with a list under 'users'")
    out: dict[str, tuple[Role, str]] = {}
    for i, item in enumerate(doc.get("users") or []):
        if not isinstance(item, dict):
            raise UsersFileError(path, f"users[{i}] is not a mapping")
        name, role, hashed = item.get("name"), item.get("role"), item.get("passwordHash")
        if not isinstance(name, str) or not _valid_name(name):
            raise UsersFileError(path, f"users[{i}]: name must be 1-{MAX_NAME} printable "
                                       "characters without spaces")
        if name in out:
            raise UsersFileError(path, f"user {name!r} is listed twice")
        try:
            parsed_role = Role(role)
        except ValueError:
            raise UsersFileError(path, f"user {name!r}: role must be admin or viewer, "
                                       f"not {role!r}") from None
        if not isinstance(hashed, str):
            raise UsersFileError(path, f"user {name!r} has no passwordHash")
        try:
            PasswordHash.parse(hashed)
        except PasswordHashError as exc:
            raise UsersFileError(path, f"user {name!r}: {exc}") from None
        out[name] = (parsed_role, hashed)
    return out


def dump_users(users: dict[str, tuple[Role, str]]) -> str:
    body = [{"name": n, "role": r.value, "passwordHash": h} for n, (r, h) in users.items()]
    return ("# TideMQ console users: tidemq console user add NAME --role admin|viewer\n"
            + yaml.safe_dump({"users": body}, sort_keys=False))


def _valid_name(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME and name.isprintable() and not any(
        c.isspace() for c in name)


def _credential(hashed: str) -> str:
    return hashlib.sha256(hashed.encode("ascii")).hexdigest()[:16]


@functools.cache
def _dummy() -> PasswordHash:
    """A hash checked when the name is unknown, so that a wrong name costs what a wrong
    password costs and the time taken does not tell which names exist."""
    return PasswordHash.parse(hash_password("tidemq-no-such-user"))


class UsersFile:
    """A :class:`UserDirectory` over a users file, read again when it changes (a file
    that no longer reads is logged and the users read before stay)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._entries: dict[str, _Entry] = {}
        self._load(strict=True)

    def _load(self, *, strict: bool) -> None:
        try:
            stat = self.path.stat()
            # the inode too: an edit renamed into place may keep the size and the time
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if stamp == self._stamp:
                return
            users = parse_users(self.path.read_text("utf-8"), str(self.path))
        except (OSError, UnicodeDecodeError, UsersFileError) as exc:
            if strict:
                if isinstance(exc, UsersFileError):
                    raise
                raise UsersFileError(str(self.path), str(exc)) from None
            log.error("console users file %s: %s (the users read before stay)",
                      self.path, exc)
            return
        self._entries = {
            name: _Entry(ConsoleUser(name, role, _credential(h)), PasswordHash.parse(h))
            for name, (role, h) in users.items()}
        self._stamp = stamp
        if not self._entries:
            log.warning("console users file %s lists no users: nobody can log in (add one "
                        "with `tidemq console user add`)", self.path)

    def _current(self) -> dict[str, _Entry]:
        with self._lock:
            self._load(strict=False)
            return self._entries

    def names(self) -> list[str]:
        return sorted(self._current())

    def lookup(self, name: str) -> ConsoleUser | None:
        entry = self._current().get(name)
        return entry.user if entry is not None else None

    def authenticate(self, name: str, password: str) -> ConsoleUser | None:
        entry = self._current().get(name)
        if entry is None:
            _dummy().matches(password)
            return None
        return entry.user if entry.hashed.matches(password) else None


def edit_users_file(path: str | Path, name: str, *, role: Role | None = None,
                    password: str | None = None, remove: bool = False,
                    cost: tuple[int, int, int] | None = None) -> ConsoleUser | None:
    """Add, change or remove one user of the file at ``path`` (created when missing),
    written whole and atomically; the user as it is now (None once removed)."""
    target = Path(path)
    text = target.read_text("utf-8") if target.exists() else ""
    users = parse_users(text, str(target))
    if not _valid_name(name):
        raise UsersFileError(str(target), f"bad user name {name!r}: 1-{MAX_NAME} printable "
                                          "characters without spaces")
    if remove:
        if users.pop(name, None) is None:
            raise UsersFileError(str(target), f"no user named {name!r}")
    else:
        old = users.get(name)
        if old is None and (role is None or password is None):
            raise UsersFileError(str(target), f"no user named {name!r} (add needs a role "
                                              "and a password)")
        new_role = role if role is not None else old[0] if old else Role.VIEWER
        if password is not None:
            hashed = hash_password(password, cost) if cost else hash_password(password)
        else:
            assert old is not None
            hashed = old[1]
        users[name] = (new_role, hashed)
    _write_atomically(target, dump_users(users))
    if remove:
        return None
    role_now, hashed_now = users[name]
    return ConsoleUser(name, role_now, _credential(hashed_now))


def _write_atomically(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise

"""``plain_acl.yml``: the accounts of RocketMQ's ACL 1.0, with its schema::

    globalWhiteRemoteAddresses: ["10.10.103.*"]   # these addresses need no credentials
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress: "192.168.0.*"        # from here: no signature, no perm checks
        admin: false
        defaultTopicPerm: DENY                   # topics not listed in topicPerms
        defaultGroupPerm: SUB                    # groups not listed in groupPerms
        topicPerms: ["topicA=DENY", "topicB=PUB|SUB"]
        groupPerms: ["groupA=DENY", "groupB=PUB|SUB"]

:func:`parse_acl` reads the text into :class:`AclRules`; :class:`AclFile` keeps the
rules of a file and reads it again when its modification time changes. A file that no
longer reads keeps the rules it had (and says why in the log).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tidemq.errors import ConfigError
from tidemq.net.acl.perm import Perm, allows, parse_perm
from tidemq.net.acl.whitelist import AddressPattern
from tidemq.net.file_stamp import FileStamp, file_stamp

__all__ = ["Account", "AclFile", "AclRules", "parse_acl"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool = False
    white: AddressPattern | None = None
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.DENY
    topic_perms: Mapping[str, Perm] = dataclasses.field(default_factory=dict)
    group_perms: Mapping[str, Perm] = dataclasses.field(default_factory=dict)

    def topic_perm(self, topic: str) -> Perm:
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> Perm:
        return self.group_perms.get(group, self.default_group_perm)

    # The gate's Principal (tidemq.net.acl.principal).

    @property
    def name(self) -> str:
        return self.access_key

    @property
    def secret(self) -> str:
        return self.secret_key

    def unusable(self) -> str | None:
        return None

    def trusted_from(self, remote: str) -> bool:
        return self.white is not None and self.white.matches(remote)

    def is_admin(self, remote: str) -> bool:
        return self.admin

    def not_admin(self, remote: str) -> str:
        return f"an admin account; {self.access_key} is not admin"

    def may(self, kind: str, name: str, needed: Perm, remote: str) -> bool:
        return allows(self.topic_perm(name) if kind == "topic" else self.group_perm(name),
                      needed)


@dataclasses.dataclass(frozen=True, slots=True)
class AclRules:
    accounts: Mapping[str, Account]
    global_white: tuple[AddressPattern, ...] = ()


def _perms(entries: Any, where: str) -> dict[str, Perm]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise ConfigError(f"{where} must be a list of 'name=PERM'", key=where)
    out: dict[str, Perm] = {}
    for entry in entries:
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{where} entry {entry!r} is not 'name=PERM'", key=where)
        try:
            out[name.strip()] = parse_perm(perm)
        except ValueError as exc:
            raise ConfigError(f"{where} entry {entry!r}: {exc}", key=where) from None
    return out


def _account(raw: Any, index: int) -> Account:
    where = f"accounts[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} is not a mapping", key=where)
    key, secret = raw.get("accessKey"), raw.get("secretKey")
    if not key or not secret:
        raise ConfigError(f"{where} needs accessKey and secretKey", key=where)
    if len(str(secret)) < 6:
        raise ConfigError(f"{where}: secretKey must be at least 6 characters",
                          key=f"{where}.secretKey")
    try:
        white = raw.get("whiteRemoteAddress")
        return Account(
            access_key=str(key), secret_key=str(secret), admin=bool(raw.get("admin", False)),
            white=AddressPattern(str(white)) if white else None,
            default_topic_perm=parse_perm(raw.get("defaultTopicPerm")),
            default_group_perm=parse_perm(raw.get("defaultGroupPerm")),
            topic_perms=_perms(raw.get("topicPerms"), f"{where}.topicPerms"),
            group_perms=_perms(raw.get("groupPerms"), f"{where}.groupPerms"))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}", key=where) from None


def parse_acl(text: str) -> AclRules:
    """The rules of a ``plain_acl.yml`` text; raises :class:`ConfigError` naming the key."""
    import yaml  # here: a server without an ACL file reads no YAML

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"plain_acl.yml is not YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError("plain_acl.yml must be a mapping")
    raw_accounts = doc.get("accounts") or []
    if not isinstance(raw_accounts, list):
        raise ConfigError("accounts must be a list", key="accounts")
    accounts: dict[str, Account] = {}
    for i, raw in enumerate(raw_accounts):
        account = _account(raw, i)
        if account.access_key in accounts:
            raise ConfigError(f"accessKey {account.access_key!r} is given twice",
                              key=f"accounts[{i}].accessKey")
        accounts[account.access_key] = account
    white = doc.get("globalWhiteRemoteAddresses") or []
    if not isinstance(white, list):
        raise ConfigError("globalWhiteRemoteAddresses must be a list",
                          key="globalWhiteRemoteAddresses")
    try:
        patterns = tuple(AddressPattern(str(w)) for w in white)
    except ValueError as exc:
        raise ConfigError(str(exc), key="globalWhiteRemoteAddresses") from None
    return AclRules(accounts, patterns)


class AclFile:
    """The rules of ``path``, read again when the file changes (looked at
    no more often than every ``poll_seconds``). Raises :class:`ConfigError` if the file
    cannot be read at construction."""

    def __init__(self, path: str | Path, *, poll_seconds: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.poll_seconds = poll_seconds
        self._clock = clock
        self._mtime = self._stat()
        if self._mtime is None:
            raise ConfigError(f"ACL file {self.path} does not exist", key="aclFile")
        self._rules = parse_acl(self.path.read_text())
        self._polled = clock()
        self.reloads = 0

    def _stat(self) -> FileStamp | None:
        return file_stamp(self.path)

    def rules(self) -> AclRules:
        """The current rules (reading the file again if it changed)."""
        now = self._clock()
        if now - self._polled >= self.poll_seconds:
            self._polled = now
            self.reload_if_changed()
        return self._rules

    # The gate's Directory (tidemq.net.acl.principal).

    def trusted_address(self, remote: str) -> bool:
        return any(p.matches(remote) for p in self.rules().global_white)

    def principal(self, access_key: str) -> Account | None:
        return self.rules().accounts.get(access_key)

    def unknown(self, access_key: str) -> str:
        return f"no account has AccessKey {access_key}"

    @property
    def version(self) -> int:
        self.rules()  # a changed file is read first
        return self.reloads

    def reload_if_changed(self) -> bool:
        """Read the file again if it changed; whether rules changed."""
        mtime = self._stat()
        if mtime is None or mtime == self._mtime:
            return False
        self._mtime = mtime
        try:
            self._rules = parse_acl(self.path.read_text())
        except (OSError, ConfigError) as exc:
            log.error("ACL file %s not reloaded, the previous rules stay: %s", self.path, exc)
            return False
        self.reloads += 1
        log.info("ACL file %s reloaded: %d accounts", self.path, len(self._rules.accounts))
        return True

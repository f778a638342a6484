"""plain_acl.yml: RocketMQ's sample file reads; mistakes name their key; a changed file
is read again, a broken one keeps the previous rules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemq.errors import ConfigError
from tidemq.net.acl import AclFile, Perm, parse_acl
from tidemq.net.acl.perm import allows, parse_perm
from tidemq.net.acl.whitelist import AddressPattern

SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


def test_rocketmqs_sample_reads() -> None:
    rules = parse_acl(SAMPLE)
    one, two = rules.accounts["RocketMQ"], rules.accounts["rocketmq2"]
    assert one.secret_key == "12345678" and not one.admin and one.white is None
    assert one.topic_perm("topicB") == Perm.PUB | Perm.SUB
    assert one.topic_perm("topicA") == Perm.DENY
    assert one.topic_perm("other") == Perm.DENY
    assert one.group_perm("other") == Perm.SUB
    assert two.admin and two.white is not None and two.white.matches("192.168.1.7:5000")
    assert not two.white.matches("192.168.2.7:5000")
    assert [p.matches("10.10.103.4:1") for p in rules.global_white] == [True, False]


@pytest.mark.parametrize(("text", "key"), [
    ("accounts: [{accessKey: a, secretKey: '12345678', topicPerms: ['t=WRITE']}]",
     "accounts[0].topicPerms"),
    ("accounts: [{accessKey: a}]", "accounts[0]"),
    ("accounts: [{accessKey: a, secretKey: '123'}]", "accounts[0].secretKey"),
    ("accounts: [{accessKey: a, secretKey: '12345678'}, {accessKey: a, secretKey: "
     "'12345678'}]", "accounts[1].accessKey"),
    ("accounts: [{accessKey: a, secretKey: '12345678', topicPerms: ['noequals']}]",
     "accounts[0].topicPerms"),
    ("globalWhiteRemoteAddresses: ['10.1']", "globalWhiteRemoteAddresses"),
])
def test_mistakes_name_their_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_acl(text)
    assert info.value.key == key


def test_permissions() -> None:
    assert parse_perm("SUB|PUB") == parse_perm("PUB|SUB") == Perm.PUB | Perm.SUB
    assert parse_perm(None) == Perm.DENY
    assert allows(Perm.PUB | Perm.SUB, Perm.PUB)
    assert not allows(Perm.SUB, Perm.PUB)
    assert not allows(Perm.DENY | Perm.PUB, Perm.PUB)


@pytest.mark.parametrize(("pattern", "yes", "no"), [
    ("*", "1.2.3.4", ""),
    ("192.168.0.1", "192.168.0.1:99", "192.168.0.2"),
    ("192.168.*", "192.168.9.9", "192.169.0.1"),
    ("192.168.1.1-5", "192.168.1.5", "192.168.1.6"),
    ("192.168.{1,3}.*", "192.168.3.200", "192.168.2.1"),
])
def test_address_patterns(pattern: str, yes: str, no: str) -> None:
    assert AddressPattern(pattern).matches(yes)
    assert not AddressPattern(pattern).matches(no)


def test_a_changed_file_is_read_again_a_broken_one_keeps_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(SAMPLE)
    now = [0.0]
    acl = AclFile(path, poll_seconds=1.0, clock=lambda: now[0])
    assert set(acl.rules().accounts) == {"RocketMQ", "rocketmq2"}
    path.write_text("accounts: [{accessKey: fresh, secretKey: '12345678'}]")
    os.utime(path, ns=(1, 1))  # a new mtime whatever the file system's resolution
    assert set(acl.rules().accounts) == {"RocketMQ", "rocketmq2"}  # not polled yet
    now[0] = 1.0
    assert set(acl.rules().accounts) == {"fresh"}
    path.write_text("accounts: [{accessKey: broken}]")
    os.utime(path, ns=(2, 2))
    now[0] = 2.0
    assert set(acl.rules().accounts) == {"fresh"}
    assert acl.reloads == 1


def test_a_file_finished_within_one_timestamp_tick_is_read_again(tmp_path: Path) -> None:
    """File systems stamp modification times with a coarse clock: a file caught
    half-written and finished within the same tick keeps its time, not its size."""
    path = tmp_path / "plain_acl.yml"
    path.write_text("accounts: [{accessKey: first, secretKey: '12345678'}]")
    os.utime(path, ns=(5, 5))
    acl = AclFile(path, poll_seconds=0.0)
    assert set(acl.rules().accounts) == {"first"}
    path.write_text("accounts: [{accessKey: second-one, secretKey: '12345678'}]")
    os.utime(path, ns=(5, 5))  # the same time, as a coarse clock would give
    assert set(acl.rules().accounts) == {"second-one"}


def test_a_missing_file_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        AclFile(tmp_path / "absent.yml")
    assert info.value.key == "aclFile"


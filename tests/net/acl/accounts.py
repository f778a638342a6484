"""The accounts the ACL tests run with: ``user`` (PUB|SUB by default, DENY on topic
``Secret``, SUB only on ``ReadOnly``, DENY on group ``closed``) and ``admin``."""

from __future__ import annotations

from pathlib import Path

from tidemq.codec.signature import Credentials

ACCOUNTS = """
accounts:
  - accessKey: user
    secretKey: user-secret
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: ["Secret=DENY", "ReadOnly=SUB"]
    groupPerms: ["closed=DENY"]
  - accessKey: admin
    secretKey: admin-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
USER = Credentials("user", "user-secret")
ADMIN = Credentials("admin", "admin-secret")


def write_accounts(directory: Path) -> Path:
    """``plain_acl.yml`` with :data:`ACCOUNTS` in ``directory``."""
    path = directory / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    return path

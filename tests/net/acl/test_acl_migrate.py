"""``migrateAuthFromV1Enabled``: a migrated account decides what it decided under ACL 1.0
-- checked exhaustively over generated accounts (property test), then on a broker that
migrates ``plain_acl.yml`` at start."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.broker import wire
from tests.broker.wire import Peer
from tests.net.acl.accounts import ADMIN, USER, write_accounts

from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient
from tidemq.net.acl.accounts import Account
from tidemq.net.acl.migrate import migrate_account
from tidemq.net.acl.perm import Perm
from tidemq.net.acl.users import UserPrincipal
from tidemq.testing import Cluster

NAMES = ["a", "b", "c"]
PERMS = [Perm.DENY, Perm.PUB, Perm.SUB, Perm.PUB | Perm.SUB, Perm.ANY]
_perm = st.sampled_from(PERMS)
_listed = st.dictionaries(st.sampled_from(NAMES), _perm, max_size=3)


@settings(deadline=None)  # a busy machine stalls a pure example past the 200 ms default
@given(st.booleans(), _perm, _perm, _listed, _listed)
def test_a_migrated_account_decides_as_before(admin: bool, topic_default: Perm,
                                              group_default: Perm,
                                              topics: dict[str, Perm],
                                              groups: dict[str, Perm]) -> None:
    account = Account("acc", "secret1", admin=admin, default_topic_perm=topic_default,
                      default_group_perm=group_default, topic_perms=topics,
                      group_perms=groups)
    user, acl = migrate_account(account)
    principal = UserPrincipal(user, acl, authorize=True, cluster="DefaultCluster")
    assert (user.username, user.password) == ("acc", "secret1")
    assert principal.is_admin("127.0.0.1:1") == admin
    for kind in ("topic", "group"):
        for name in [*NAMES, "unlisted"]:
            for needed in (Perm.PUB, Perm.SUB, Perm.PUB | Perm.SUB):
                assert principal.may(kind, name, needed, "127.0.0.1:1") == account.may(
                    kind, name, needed, "127.0.0.1:1"), (kind, name, needed)


async def test_a_broker_migrates_plain_acl_at_start(tmp_path: Path) -> None:
    broker = {"authentication_enabled": True, "authorization_enabled": True,
              "migrate_auth_from_v1_enabled": True,
              "acl_file": str(write_accounts(tmp_path)),
              "inner_client_authentication_credentials": json.dumps(
                  {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key})}
    async with Cluster(tmp_path / "c", broker=broker) as cluster:
        addr = cluster.brokers[0].broker_addr
        assert cluster.brokers[0].auth_store.user("user") is not None
        async with Peer(addr, RemotingClient(credentials=ADMIN)) as admin, \
                Peer(addr, RemotingClient(credentials=USER)) as user:
            await admin.ok(wire.create_topic("Pt", 1))
            await admin.ok(wire.create_topic("Secret", 1))
            await user.ok(wire.send("Pt", b"migrated"))
            resp = await user(wire.send("Secret", b"x"))
            assert (resp.code, resp.remark) == (
                ResponseCode.NO_PERMISSION,
                "SEND_MESSAGE_V2 needs PUB on topic Secret; user does not have it")
            resp = await user(wire.create_topic("ByUser", 1))
            assert resp.code == ResponseCode.NO_PERMISSION

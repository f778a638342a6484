"""A broker's ACL 2.0 users as logins, read from a real broker: who counts as an
administrator (Super, or Update on the cluster from anywhere), disabled users left out,
and an account that may not read them refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.net.acl.users import ACL2, ALICE, ROOT

from tidemq.client import AdminClient, ClientConfig
from tidemq.client.acl_logins import AclLogin, acl_logins
from tidemq.client.auth_admin import AuthAdmin
from tidemq.errors import BrokerResponseError, ResponseCode
from tidemq.testing import Cluster


def _admin(cluster: Cluster, key: str, secret: str) -> AdminClient:
    return AdminClient(config=ClientConfig(namesrv_addr=(cluster.namesrv_addr,),
                                           access_key=key, secret_key=secret))


async def test_roles_follow_the_brokers_admin_rule(tmp_path: Path) -> None:
    async with Cluster(tmp_path / "c", broker=ACL2) as cluster:
        name = cluster.brokers[0].config.broker_cluster_name
        async with _admin(cluster, ROOT.access_key, ROOT.secret_key) as admin:
            auth = AuthAdmin(admin)
            for user in ("ops", "anyops", "local", "reader", "off"):
                await auth.create_user(user, f"{user}-secret")
            await auth.create_acl("User:ops", [f"Cluster:{name}"], ["Update"])
            await auth.create_acl("User:anyops", ["Cluster:*"], ["All"])
            await auth.create_acl("User:local", [f"Cluster:{name}"], ["Update"],
                                  source_ips=["127.0.0.1"])
            await auth.create_acl("User:reader", ["Topic:*"], ["Sub"])
            await auth.update_user("off", user_status="disable")
            got = await acl_logins(admin, cluster.brokers[0].broker_addr)
            assert got == await acl_logins(admin)  # the first master is the only one
        assert [(u.name, u.admin) for u in got] == [
            ("anyops", True), ("local", False), ("ops", True), ("reader", False),
            ("root", True)]
        assert got[-1] == AclLogin("root", ROOT.secret_key, True)
        assert ROOT.secret_key not in repr(got[-1])

        async with _admin(cluster, ALICE.access_key, ALICE.secret_key) as stranger:
            with pytest.raises(BrokerResponseError) as info:
                await acl_logins(stranger)
        assert info.value.code == ResponseCode.NO_PERMISSION

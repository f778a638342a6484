"""``tidemq admin copyUser`` and ``copyAcl`` between the two brokers of a real cluster: the
users arrive with their passwords, the ACLs with their entries, created where the target
lacks them and updated where it has them."""

from __future__ import annotations

from tests.cli.conftest import ThreadedCluster
from tests.cli.test_admin_cli import admin
from tests.cli.test_admin_groups_cli import human


def test_copy_user(cluster: ThreadedCluster) -> None:
    a, b = cluster.broker_addrs
    target = cluster.cluster.brokers[1].auth_store
    admin(cluster, "createUser", "-b", a, "-u", "copy-ann", "-p", "ann-secret")
    admin(cluster, "createUser", "-b", a, "-u", "copy-bob", "-p", "bob-secret", "-t", "Super")
    admin(cluster, "createUser", "-b", b, "-u", "copy-bob", "-p", "stale-pw")
    out = admin(cluster, "copyUser", "-f", a, "-t", b, "-u", "copy-bob,copy-nobody")
    assert out == {"fromBroker": a, "toBroker": b, "users": ["copy-bob"]}
    bob = target._existing("copy-bob")
    assert (bob.password, bob.user_type.value) == ("bob-secret", "Super")
    assert "copy-ann" not in target._users
    lines = human(cluster, "copyUser", "-f", a, "-t", b)
    assert ["copy", "user", "of", "copy-ann", "from", a, "to", b, "success."] in lines
    assert target._existing("copy-ann").password == "ann-secret"


def test_copy_acl(cluster: ThreadedCluster) -> None:
    a, b = cluster.broker_addrs
    admin(cluster, "createUser", "-c", "DefaultCluster", "-u", "acl-carl", "-p", "carl-pw")
    admin(cluster, "createUser", "-c", "DefaultCluster", "-u", "acl-dora", "-p", "dora-pw")
    admin(cluster, "createAcl", "-b", a, "-s", "User:acl-carl", "-r", "Topic:orders-*",
          "-a", "Pub,Sub")
    admin(cluster, "createAcl", "-b", a, "-s", "User:acl-dora", "-r", "Group:g1", "-a", "Sub",
          "-d", "Deny")
    admin(cluster, "createAcl", "-b", b, "-s", "User:acl-carl", "-r", "Topic:audit", "-a",
          "Sub")
    out = admin(cluster, "copyAcl", "-f", a, "-t", b, "-s", "User:acl-carl")
    assert out["acls"] == ["User:acl-carl"]
    (carl,) = admin(cluster, "getAcl", "-b", b, "-s", "User:acl-carl")[b]
    resources = {e["resource"]: (e["actions"], e["decision"])
                 for p in carl["policies"] for e in p["entries"]}
    assert resources == {"Topic:orders-*": (["Pub", "Sub"], "Allow"),
                         "Topic:audit": (["Sub"], "Allow")}
    assert admin(cluster, "getAcl", "-b", b, "-s", "User:acl-dora", code=1)
    lines = human(cluster, "copyAcl", "-f", a, "-t", b)
    assert ["copy", "acl", "of", "User:acl-dora", "from", a, "to", b, "success."] in lines
    (dora,) = admin(cluster, "getAcl", "-b", b, "-s", "User:acl-dora")[b]
    assert [(e["resource"], e["decision"]) for p in dora["policies"] for e in p["entries"]] == [
        ("Group:g1", "Deny")]

"""docs/admin.md names every ``tidemq admin`` command of the mqadmin set (the KV, ACL,
controller and logical-queue commands are documented with their features)."""

from __future__ import annotations

import re
from pathlib import Path

from tidemq.cli.main import build_app

#: Documented with their features (security.md, replication.md, logical-queues.md, README).
ELSEWHERE = frozenset({
    "updateKvConfig", "deleteKvConfig", "getKvConfig",
    "createUser", "updateUser", "deleteUser", "getUser", "listUser",
    "createAcl", "updateAcl", "deleteAcl", "getAcl", "listAcl", "copyUser", "copyAcl",
    "cleanBrokerMetadata", "electMaster", "getBrokerEpoch", "getControllerMetaData",
    "getControllerConfig", "updateControllerConfig",
    "getSyncStateSet",
    "updateLogicalQueueMapping", "deleteLogicalQueueMapping", "queryLogicalQueueMapping",
    "migrateLogicalQueue", "updateLogicalQueueNum",
})


def test_every_admin_command_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "admin.md").read_text()
    (admin,) = build_app("admin").registered_groups
    assert admin.typer_instance is not None
    names = {c.name for c in admin.typer_instance.registered_commands if c.name}
    documented = set(re.findall(r"`(\w+)`", doc))
    missing = sorted(names - documented - ELSEWHERE)
    assert not missing, f"not in docs/admin.md: {missing}"

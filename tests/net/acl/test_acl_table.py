"""The permission table: the copy in docs/security.md is the code's, and every rule says
something (the table-driven checks against running servers are in test_acl_gate)."""

from __future__ import annotations

from pathlib import Path

from tidemq.codec.command import RequestCode
from tidemq.net.acl import PERMISSIONS, Need
from tidemq.net.acl.table import markdown_table


def test_the_documented_permission_table_is_the_codes() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "security.md").read_text()
    start = doc.index("<!-- permission-table")
    block = doc[doc.index("\n", start) + 1:doc.index("<!-- /permission-table -->")]
    assert block == markdown_table()


def test_resource_rules_name_a_field_and_a_permission() -> None:
    for code, rule in PERMISSIONS.items():
        assert RequestCode(code).name
        if rule.need is Need.RESOURCE:
            assert rule.topic_keys or rule.group_keys or rule.body in ("heartbeat", "lock"), code
            assert (not rule.topic_keys or rule.topic_perm) and (
                not rule.group_keys or rule.group_perm), code

"""The ACL 2.0 set-up the tests share: a broker with ``authenticationEnabled`` and
``authorizationEnabled``, its Super user ``root`` from ``initAuthenticationUser`` (also
the broker's own credentials), and a Normal user ``alice`` whose ACL :data:`ALICE_ACL`
allows Pub and Sub on topic ``Pt``, Pub on ``orders-*`` but not ``orders-secret``, Sub on
``ReadOnly`` and on group ``cg``."""

from __future__ import annotations

import json
from typing import Any

from tidemq.codec.signature import Credentials

ROOT = Credentials("root", "root-secret")
ALICE = Credentials("alice", "alice-secret")

ACL2: dict[str, Any] = {
    "authentication_enabled": True, "authorization_enabled": True,
    "init_authentication_user": json.dumps({"username": ROOT.access_key,
                                            "password": ROOT.secret_key}),
    "inner_client_authentication_credentials": json.dumps(
        {"accessKey": ROOT.access_key, "secretKey": ROOT.secret_key}),
}

#: (resources, actions, decision) of alice's ACL entries.
ALICE_ACL = [
    (["Topic:Pt"], ["Pub", "Sub"], "Allow"),
    (["Topic:orders-*"], ["Pub"], "Allow"),
    (["Topic:orders-secret"], ["All"], "Deny"),
    (["Topic:ReadOnly"], ["Sub"], "Allow"),
    (["Group:cg"], ["Sub"], "Allow"),
]

"""The table-driven sweep of the ACL tests: every registered request code sent by one
account, refused exactly when the permission table's rule says so."""

from __future__ import annotations

from collections.abc import Iterable

from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.signature import Credentials
from tidemq.errors import ResponseCode
from tidemq.net import RemotingClient
from tidemq.net.acl import PERMISSIONS, AclGate, Need

NO_PERMISSION = ResponseCode.NO_PERMISSION


def signed_client(credentials: Credentials | None) -> RemotingClient:
    return RemotingClient(request_timeout=10.0, credentials=credentials)


def generic_request(code: int) -> RemotingCommand:
    """A request naming topic Pt and group cg under every field name the table reads."""
    return wire.request(code, topic="Pt", b="Pt", consumerGroup="cg", group="cg",
                        producerGroup="pg", a="pg", queueId=0)


async def sweep(addr: str, gate: AclGate, credentials: Credentials | None,
                codes: Iterable[int], role: str) -> tuple[dict[str, bool], dict[str, bool]]:
    """Send each of ``codes`` as ``role`` (``nobody``: unsigned, ``normal`` or ``admin``);
    which were refused, and which the table says must be. A refusal must be the gate's
    (counted, NO_PERMISSION with the rule in its remark)."""
    got: dict[str, bool] = {}
    expected: dict[str, bool] = {}
    async with Peer(addr, signed_client(credentials)) as peer:
        for code in codes:
            name = RequestCode(code).name
            need = PERMISSIONS[code].need
            expected[name] = (need is not Need.OPEN if role == "nobody"
                              else need is Need.ADMIN if role == "normal" else False)
            before = sum(gate.refused.values())
            resp = await peer(generic_request(code))
            refused = sum(gate.refused.values()) > before
            assert refused == (resp.code == NO_PERMISSION and "needs" in (resp.remark or "")), \
                (name, resp.code, resp.remark)
            got[name] = refused
    return got, expected

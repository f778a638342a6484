"""Which kind of server serves a request code, and the refusal of a request sent to the
wrong kind.

A client given the wrong port -- a broker's address where a name server's is wanted
(10911 for 9876), or the other way round -- sends requests the server it reached does
not serve. Every server answers them REQUEST_CODE_NOT_SUPPORTED (3) with upstream's
remark, `` request type N not supported``; TideMQ's servers go on to say what they are,
whose request it was, and which address it needs, when the code is one of the
name server's, a controller's or a broker's.

The name server's and the controller's codes are listed here; every other code of
:class:`~tidemq.codec.command.RequestCode` is a broker's.
"""

from __future__ import annotations

from typing import Literal

from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode

__all__ = ["CONTROLLER_REQUESTS", "NAMESRV_REQUESTS", "Role", "refuse_unserved",
           "unserved_remark"]

Role = Literal["broker", "name server", "controller"]

#: The requests a name server serves (the controller's too when one is embedded).
NAMESRV_REQUESTS: frozenset[int] = frozenset({
    RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER,
    RequestCode.GET_ROUTEINFO_BY_TOPIC, RequestCode.GET_BROKER_CLUSTER_INFO,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
    RequestCode.QUERY_DATA_VERSION, RequestCode.BROKER_HEARTBEAT,
    RequestCode.PUT_KV_CONFIG, RequestCode.GET_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
    RequestCode.GET_KVLIST_BY_NAMESPACE, RequestCode.GET_NAMESRV_CONFIG,
    RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER,
})

#: The requests a controller serves.
CONTROLLER_REQUESTS: frozenset[int] = frozenset({
    RequestCode.CONTROLLER_REGISTER_BROKER, RequestCode.CONTROLLER_ELECT_MASTER,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, RequestCode.CLEAN_BROKER_DATA,
    RequestCode.CONTROLLER_GET_REPLICA_INFO, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
    RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.BROKER_HEARTBEAT,
    RequestCode.GET_CONTROLLER_CONFIG, RequestCode.UPDATE_CONTROLLER_CONFIG,
})

#: What a client calls the address each kind of server is given by.
_ADDRESS_OF: dict[Role, str] = {
    "name server": "a name server's address (-n, namesrvAddr)",
    "controller": "a controller's address (-a, controllerAddr)",
    "broker": "a broker's address (-b, as clusterList lists them)",
}


def _owner(code: int) -> Role | None:
    """The kind of server that serves ``code``; ``None`` for a code TideMQ does not know."""
    if code in NAMESRV_REQUESTS:
        return "name server"
    if code in CONTROLLER_REQUESTS:
        return "controller"
    return "broker" if code in RequestCode._value2member_map_ else None


def unserved_remark(code: int, server: Role, name: str = "") -> str:
    """The remark refusing request ``code`` on a ``server`` (named ``name``) that does
    not serve it: upstream's words, then whose request it is when another kind's."""
    remark = f" request type {code} not supported"
    owner = _owner(code)
    if owner is None or owner == server:
        return remark
    this = f"{server} ({name})" if name else server
    return (f"{remark}: this is a {this}, and {RequestCode(code).name} is a {owner}'s "
            f"request: give {_ADDRESS_OF[owner]}")


def refuse_unserved(request: RemotingCommand, server: Role, name: str = ""
                    ) -> RemotingCommand:
    """The REQUEST_CODE_NOT_SUPPORTED answer to ``request`` (see :func:`unserved_remark`)."""
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            unserved_remark(request.code, server, name))

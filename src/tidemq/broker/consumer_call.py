"""Asking one online consumer something on its own connection, for an admin: the
requests a broker passes on (GET_CONSUMER_RUNNING_INFO 307, CONSUME_MESSAGE_DIRECTLY 309)
and how their failures are answered, as upstream's ``callConsumer``.

========================================  ==========================================
the consumer                              the admin is answered
========================================  ==========================================
is not online here                        CONSUMER_NOT_ONLINE naming it
does not answer within the timeout        CONSUME_MSG_TIMEOUT naming it
is lost before it answers                 SYSTEM_ERROR with the cause
answers                                   its code, remark and body, untouched
========================================  ==========================================
"""

from __future__ import annotations

from tidemq.broker.clients import ConsumerManager
from tidemq.codec.command import RemotingCommand
from tidemq.errors import RequestTimeout, ResponseCode, TideMQError, error_for_code
from tidemq.net import Connection

__all__ = ["CLIENT_TIMEOUT", "call_consumer", "consumer_connection"]

#: How long a consumer has to answer, seconds.
CLIENT_TIMEOUT = 5.0


def consumer_connection(consumers: ConsumerManager, group: str, client_id: str) -> Connection:
    """The open connection of consumer ``client_id`` of ``group``; raises
    CONSUMER_NOT_ONLINE when there is none."""
    info = consumers.groups.get(group)
    channel = info.channels.get(client_id) if info is not None else None
    if channel is None or not channel.conn.is_open:
        raise error_for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                             f"The consumer <{client_id}> <{group}> not online")
    return channel.conn


async def call_consumer(conn: Connection, ask: RemotingCommand, *, group: str,
                        client_id: str, timeout: float = CLIENT_TIMEOUT) -> RemotingCommand:
    """``ask`` sent to the consumer on ``conn``, and its answer."""
    try:
        return await conn.request(ask, timeout)
    except RequestTimeout as exc:
        raise error_for_code(ResponseCode.CONSUME_MSG_TIMEOUT,
                             f"consumer <{group}> <{client_id}> did not answer: {exc}"
                             ) from None
    except TideMQError as exc:
        raise error_for_code(ResponseCode.SYSTEM_ERROR,
                             f"consumer <{group}> <{client_id}> did not answer: {exc}"
                             ) from None

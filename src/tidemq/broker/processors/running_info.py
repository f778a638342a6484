"""GET_CONSUMER_RUNNING_INFO (307): an admin asks a broker about one online consumer; the
broker passes the request on the consumer's own connection (same code and ext:
``consumerGroup``, ``clientId``, ``jstackEnable``) and relays its answer, as upstream.

A consumer that is not online here is answered CONSUMER_NOT_ONLINE naming it; one that
does not answer within the timeout is answered SYSTEM_ERROR saying so. The consumer's
body is passed through untouched.
"""

from __future__ import annotations

from tidemq.broker.context import BrokerContext
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, TideMQError, error_for_code
from tidemq.net import Connection

__all__ = ["RunningInfoProcessor"]

#: How long the consumer has to answer, seconds.
CLIENT_TIMEOUT = 5.0


class RunningInfoProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.GET_CONSUMER_RUNNING_INFO, self.running_info)

    async def running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        client_id = cmd.ext_fields.get("clientId", "")
        if not group or not client_id:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 "consumerGroup and clientId are required")
        info = self.ctx.consumers.groups.get(group)
        channel = info.channels.get(client_id) if info is not None else None
        if channel is None or not channel.conn.is_open:
            raise error_for_code(ResponseCode.CONSUMER_NOT_ONLINE,
                                 f"The consumer <{client_id}> <{group}> not online")
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                      dict(cmd.ext_fields))
        try:
            answer = await channel.conn.request(ask, CLIENT_TIMEOUT)
        except TideMQError as exc:
            raise error_for_code(ResponseCode.SYSTEM_ERROR,
                                 f"consumer {client_id} did not answer: {exc}") from None
        return cmd.response(answer.code, answer.remark, body=bytes(answer.full_body()))

"""GET_CONSUMER_RUNNING_INFO (307): an admin asks a broker about one online consumer; the
broker passes the request on the consumer's own connection (same code and ext:
``consumerGroup``, ``clientId``, ``jstackEnable``) and relays its answer, as upstream.
Failures are answered as :mod:`tidemq.broker.consumer_call` says; the consumer's body is
passed through untouched.
"""

from __future__ import annotations

from tidemq.broker.consumer_call import call_consumer, consumer_connection
from tidemq.broker.context import BrokerContext
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.errors import ResponseCode, error_for_code
from tidemq.net import Connection

__all__ = ["RunningInfoProcessor"]


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
        target = consumer_connection(self.ctx.consumers, group, client_id)
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO,
                                      dict(cmd.ext_fields))
        answer = await call_consumer(target, ask, group=group, client_id=client_id)
        return cmd.response(answer.code, answer.remark, body=bytes(answer.full_body()))

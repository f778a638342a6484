"""CONSUME_MESSAGE_DIRECTLY (309): an admin has one stored message consumed again by one
online consumer of a group, whatever its offsets say (mqadmin's ``queryMsgByUniqueKey
-g GROUP -d CLIENT_ID``, the console's "resend to consumer").

The admin sends the request to the broker that stores the message, with the message's
offset id in ``msgId`` (:class:`~tidemq.codec.headers.ConsumeMessageDirectlyResultRequestHeader`).
The broker reads the record at that offset, fills in ``brokerName`` (its own name),
``topicSysFlag`` and ``groupSysFlag`` as upstream does, and passes the request, with the
record as its body, on the consumer's own connection. The consumer runs its listener on
the message and answers a ``ConsumeMessageDirectlyResult``
(:class:`~tidemq.codec.bodies.ConsumeMessageDirectlyResult`), which the broker relays.
Nothing is committed: offsets, retries and the dead-letter queue are left alone.

Where upstream sends the consumer an empty body when ``msgId`` is not an offset id, this
broker answers INVALID_PARAMETER, and NO_MESSAGE when no record starts at the offset;
a consumer that is not online, is lost or is late is answered as
:mod:`tidemq.broker.consumer_call` says.
"""

from __future__ import annotations

from tidemq.broker.consumer_call import call_consumer, consumer_connection
from tidemq.broker.context import BrokerContext
from tidemq.broker.processors.decode import parse_header
from tidemq.broker.record_lookup import record_at
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import ConsumeMessageDirectlyResultRequestHeader
from tidemq.errors import CorruptRecord, ResponseCode, error_for_code
from tidemq.formats.msgid import decode_offset_msg_id
from tidemq.net import Connection

__all__ = ["ConsumeDirectlyProcessor"]


class ConsumeDirectlyProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx

    def register(self, server: object) -> None:
        reg = server.register  # type: ignore[attr-defined]
        reg(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_directly)

    def _ask(self, cmd: RemotingCommand) -> tuple[RemotingCommand, Connection, str, str]:
        """Decide everything before any I/O: the request for the consumer, its
        connection, its group and client id."""
        h = parse_header(ConsumeMessageDirectlyResultRequestHeader, cmd)
        if not h.consumer_group or not h.client_id:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 "consumerGroup and clientId are required")
        try:
            _, phys = decode_offset_msg_id(h.msg_id or "")
        except CorruptRecord as exc:
            raise error_for_code(ResponseCode.INVALID_PARAMETER,
                                 f"msgId must be the message's offset id: {exc}") from None
        record = record_at(self.ctx.store, phys)
        if record is None:
            raise error_for_code(ResponseCode.NO_MESSAGE,
                                 f"no message is stored at offset {phys} ({h.msg_id})")
        target = consumer_connection(self.ctx.consumers, h.consumer_group, h.client_id)
        ext = dict(cmd.ext_fields)
        ext["brokerName"] = self.ctx.config.broker_name
        topic = self.ctx.topics.get(h.topic) if h.topic else None
        if topic is not None:
            ext["topicSysFlag"] = str(topic.topic_sys_flag)
        group = self.ctx.subscription_groups.groups.get(h.consumer_group)
        if group is not None:
            ext["groupSysFlag"] = str(group.get("groupSysFlag", 0))
        ask = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext,
                                      body=bytes(record))
        return ask, target, h.consumer_group, h.client_id

    async def consume_directly(self, conn: Connection, cmd: RemotingCommand
                               ) -> RemotingCommand:
        ask, target, group, client_id = self._ask(cmd)
        answer = await call_consumer(target, ask, group=group, client_id=client_id)
        return cmd.response(answer.code, answer.remark, body=bytes(answer.full_body()))

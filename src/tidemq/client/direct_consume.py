"""A consumer's side of CONSUME_MESSAGE_DIRECTLY (309): a broker passes on an admin's
request to consume one stored message (the record is the request's body); the push
consumer of the named group runs its listener on it, outside its queues -- no offset is
committed and a failure is not sent back -- and answers a
:class:`~tidemq.codec.bodies.ConsumeMessageDirectlyResult`, as Java's
``consumeMessageDirectly`` of its consume services does:

=========================================  ===============================================
the listener                               ``consumeResult`` (``remark``)
=========================================  ===============================================
answers CONSUME_SUCCESS                    ``CR_SUCCESS``
answers RECONSUME_LATER                    ``CR_LATER`` (an orderly consumer's "suspend")
answers None                               ``CR_RETURN_NULL``
answers anything else                      ``CR_LATER`` (what it answered)
raises                                     ``CR_THROW_EXCEPTION`` (the exception)
=========================================  ===============================================

``order`` is true for an orderly consumer; ``spentTimeMills`` is the listener's time. A
message of the group's retry topic is given under its original topic, as in normal
delivery. A client with no consumer of the group, or only a pull consumer, answers
SYSTEM_ERROR saying so; a body that holds no message, INVALID_PARAMETER.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

from tidemq.client.listener import ConsumeStatus
from tidemq.client.retry import restore_retry_topic
from tidemq.codec.bodies import CMResult, ConsumeMessageDirectlyResult, encode_body
from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import ConsumeMessageDirectlyResultRequestHeader
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode, TideMQError
from tidemq.types import MessageExt

__all__ = ["DirectConsumer", "answer_consume_directly", "run_listener"]


@runtime_checkable
class DirectConsumer(Protocol):
    """A consumer that can consume one message given to it directly (push consumers)."""

    async def consume_directly(self, msg: MessageExt, broker_name: str
                               ) -> ConsumeMessageDirectlyResult: ...


async def run_listener(listen: Callable[[list[MessageExt]], Awaitable[object]],
                       msg: MessageExt, *, group: str, broker_name: str, orderly: bool
                       ) -> ConsumeMessageDirectlyResult:
    """``listen([msg])``, timed, and what it answered (the module's table)."""
    msg.broker_name = broker_name or msg.broker_name
    msgs = [msg]
    restore_retry_topic(msgs, group)
    result = ConsumeMessageDirectlyResult(order=orderly)
    begin = time.monotonic()
    try:
        status = await listen(msgs)
    except Exception as exc:
        result.consume_result = CMResult.CR_THROW_EXCEPTION
        result.remark = f"{type(exc).__name__}: {exc}"
    else:
        if status is ConsumeStatus.CONSUME_SUCCESS:
            result.consume_result = CMResult.CR_SUCCESS
        elif status is ConsumeStatus.RECONSUME_LATER:
            result.consume_result = CMResult.CR_LATER
        elif status is None:
            result.consume_result = CMResult.CR_RETURN_NULL
        else:
            result.consume_result = CMResult.CR_LATER
            result.remark = f"the listener answered {status!r}, not a ConsumeStatus"
    result.spent_time_mills = int((time.monotonic() - begin) * 1000)
    return result


async def answer_consume_directly(cmd: RemotingCommand, members: Mapping[str, object],
                                  client_id: str) -> RemotingCommand:
    """The answer of client ``client_id``, whose consumers by group are ``members``."""
    try:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext(cmd.ext_fields)
        found = decode_messages(cmd.full_body())
    except TideMQError as exc:
        return cmd.response(ResponseCode.INVALID_PARAMETER,
                            f"bad CONSUME_MESSAGE_DIRECTLY request: {exc}")
    if len(found) != 1:
        return cmd.response(ResponseCode.INVALID_PARAMETER,
                            f"CONSUME_MESSAGE_DIRECTLY carries {len(found)} messages, not 1")
    group = header.consumer_group
    member = members.get(group)
    if member is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            f"The Consumer Group <{group}> not exist in this consumer "
                            f"({client_id})")
    if not isinstance(member, DirectConsumer):
        return cmd.response(ResponseCode.SYSTEM_ERROR,
                            f"the consumer of group {group} in {client_id} is not a push "
                            "consumer: only a push consumer consumes a message directly")
    result = await member.consume_directly(found[0], header.origin_broker or "")
    return cmd.response(body=encode_body(result))

"""mqadmin's ``-g GROUP -d CLIENT_ID`` of ``queryMsgByUniqueKey`` and ``queryMsgById``:
instead of printing the message, have that consumer consume it again
(CONSUME_MESSAGE_DIRECTLY, :func:`tidemq.client.group_admin.consume_message_directly`)
and print what its listener answered, in mqadmin's words::

    ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS, remark=null, spentTimeMills=2]
"""  # noqa: E501

from __future__ import annotations

from typing import Annotated

import msgspec
import typer

from tidemq.cli.commands.admin_common import console_out, emit_json, run_admin
from tidemq.client import group_admin

__all__ = ["ClientIdOpt", "ConsumerGroupOpt", "resend_to_consumer", "wants_resend"]

ConsumerGroupOpt = Annotated[str | None, typer.Option(
    "-g", "--consumerGroup", help="With -d: have this group's consumer consume the message.")]
ClientIdOpt = Annotated[str | None, typer.Option(
    "-d", "--clientId", help="With -g: the consumer's client id (consumerConnection lists "
                             "them).")]


def wants_resend(group: str | None, client_id: str | None) -> bool:
    """Whether ``-g``/``-d`` ask for a resend; one without the other is a bad flag."""
    if bool(group) != bool(client_id):
        raise typer.BadParameter("-g (consumer group) and -d (client id) go together")
    return bool(group)


def resend_to_consumer(namesrv: str, group: str, client_id: str, topic: str | None,
                       msg_id: str, json_out: bool) -> None:
    """Have ``client_id`` of ``group`` consume ``msg_id`` and print its answer."""
    result = run_admin(namesrv, lambda admin: group_admin.consume_message_directly(
        admin, group, client_id, topic, msg_id))
    if json_out:
        emit_json(msgspec.to_builtins(result))
    else:
        console_out().print(str(result), markup=False, soft_wrap=True)

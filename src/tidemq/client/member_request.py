"""A consumer's request to one member of a queue's broker group, moving to another
member when the first does not answer.

Pulls go to the member the last answer suggested (:mod:`tidemq.client.suggestions`);
offset commits and queries go to the master. When the name servers list no master (it
is down), both go to a replica of the group (docs/replication.md). A request whose
connection is lost asks the name servers for the route again and is sent once more, to
the master if another is listed, else to a replica: a consumer goes on reading from the
replica without a restart when its master dies.

:class:`Answer` says which address answered and whether it was the group's master as
the route lists it, so that the caller can keep an offset commit a replica took and
send it to the master once one is back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tidemq.client.batch_rpc import batch_requester
from tidemq.client.instance import ClientInstance
from tidemq.client.topic_route import MASTER_ID
from tidemq.codec.command import RemotingCommand
from tidemq.errors import ConnectionLost
from tidemq.types import MessageQueue

__all__ = ["Answer", "member_request"]


class Answer(NamedTuple):
    response: RemotingCommand
    address: str
    #: The address answering is the master the cached route lists for the group.
    master: bool


async def member_request(inst: ClientInstance, queue: MessageQueue,
                         build: Callable[[], RemotingCommand], *,
                         broker_id: int = MASTER_ID, timeout: float | None = None,
                         alone: bool = False) -> Answer:
    """``build()`` sent to the member of ``queue``'s group that ``broker_id`` picks
    (:meth:`ClientInstance.read_address`), through the batch requester (``alone``, as
    :meth:`~tidemq.client.batch_rpc.BatchRequester.request`); on a lost connection,
    once more to the member a fresh route names, when it is another address."""
    requester = batch_requester(inst)
    addr = await inst.read_address(queue, broker_id=broker_id)
    try:
        response = await requester.request(addr, build(), timeout, alone=alone)
    except ConnectionLost:
        if broker_id != MASTER_ID:
            inst.suggestions.forget(queue)
        fresh = await inst.read_address(queue, refresh=True)
        if fresh == addr:
            raise
        addr = fresh
        response = await requester.request(addr, build(), timeout, alone=alone)
    return Answer(response, addr, addr == inst.routes.master_address(queue.broker_name))

"""Which member of its broker group each queue is pulled from next, as the brokers
suggest it.

Every pull answer carries ``suggestWhichBrokerId``: a master with ``slaveReadEnable``
names a replica for a consumer reading far behind the end of its log, and the master
(0) otherwise (docs/replication.md). As upstream's ``PullAPIWrapper``, the client
remembers the last suggestion per queue and sends the queue's next pull to that member;
:func:`~tidemq.client.topic_route.read_member` turns the id into a listed member (the
master, or a replica while the master is down). A pull that fails on its connection
forgets the queue's suggestion: the next one goes to the master, or to whichever member
the refreshed route lists.

Only suggestions other than the master are kept, so the table holds no more than the
queues currently sent to replicas.
"""

from __future__ import annotations

from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import PullMessageResponseHeader
from tidemq.types import MessageQueue

__all__ = ["PullSuggestions"]

_SUGGEST = PullMessageResponseHeader.ext_keys()["suggest_which_broker_id"]
#: Above any brokerId a group could list; a larger suggestion is ignored.
_MAX_BROKER_ID = 1 << 31


class PullSuggestions:
    """The suggested member per queue; see the module docstring. No I/O."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[MessageQueue, int] = {}

    def broker_id(self, queue: MessageQueue) -> int:
        """The member to pull ``queue`` from next: the last suggestion, else 0."""
        return self._ids.get(queue, 0)

    def note(self, queue: MessageQueue, response: RemotingCommand) -> None:
        """Remember the suggestion a pull answer for ``queue`` carries (none, or one
        that is not a brokerId, leaves the master)."""
        text = response.ext_fields.get(_SUGGEST)
        if text is None or text == "0":
            self._ids.pop(queue, None)
            return
        try:
            broker_id = int(text)
        except ValueError:
            broker_id = 0
        if 0 < broker_id < _MAX_BROKER_ID:
            self._ids[queue] = broker_id
        else:
            self._ids.pop(queue, None)

    def forget(self, queue: MessageQueue) -> None:
        """Pull ``queue`` from the master again (its suggested member did not answer)."""
        self._ids.pop(queue, None)

    def __len__(self) -> int:
        return len(self._ids)

"""How far each open logical-queue segment is known to reach: the evidence a forced cut
(:func:`~tidemq.formats.logical_migration.forced_cut`) takes its end from when the
segment's broker is dead.

A broker learns that the physical queue ``(broker, queueId)`` of a topic holds at least
``end`` messages in two ways: a send it forwarded there was answered as stored (its
queue offset plus the messages it carried), and a peer's answer to
QUERY_LOGICAL_QUEUE_MAPPING listed the ends that peer knows, its own open segments'
included (the peers compare copies every ``logicalSyncInterval``). The ends are kept in
memory only; a restarted broker learns them again. The field's wire form is
:mod:`tidemq.codec.logical_ends`.
"""

from __future__ import annotations

from tidemq.broker.codes import SEND_CODES
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.logical_ends import decode_ends, encode_ends
from tidemq.errors import ResponseCode

__all__ = ["KnownEnds"]

#: Send answers that mean the message is in the store (flushed or not, replicated or not).
_STORED = frozenset({ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT,
                     ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT})


class KnownEnds:
    """``(topic, broker, queueId) -> end``: the highest end seen, exclusive."""

    def __init__(self) -> None:
        self._ends: dict[tuple[str, str, int], int] = {}

    def saw(self, topic: str, broker: str, queue_id: int, end: int) -> None:
        key = (topic, broker, queue_id)
        if end > self._ends.get(key, -1):
            self._ends[key] = end

    def saw_send(self, broker: str, cmd: RemotingCommand, resp: RemotingCommand) -> None:
        """A physical send forwarded to ``broker`` and its answer."""
        if cmd.code not in SEND_CODES or resp.code not in _STORED:
            return
        v2 = cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
        try:
            topic = cmd.ext_fields["b" if v2 else "topic"]
            queue_id = int(cmd.ext_fields["e" if v2 else "queueId"])
            offset = int(resp.ext_fields["queueOffset"])
        except (KeyError, ValueError):
            return
        count = (resp.ext_fields.get("msgId") or "").count(",") + 1
        self.saw(topic, broker, queue_id, offset + count)

    def get(self, topic: str, broker: str, queue_id: int) -> int:
        """The highest end known, -1 if none."""
        return self._ends.get((topic, broker, queue_id), -1)

    def forget(self, topic: str) -> None:
        """``topic``'s mapping was deleted: a topic created again starts from nothing."""
        for key in [k for k in self._ends if k[0] == topic]:
            del self._ends[key]

    def encode(self, topic: str, own: dict[tuple[str, int], int]) -> str:
        """The ``ends`` field for ``topic``: what is known, raised by ``own`` (this
        broker's open segments, read from its store)."""
        ends = {(b, q): e for (t, b, q), e in self._ends.items() if t == topic}
        for key, end in own.items():
            ends[key] = max(end, ends.get(key, -1))
        return encode_ends(ends)

    def take(self, topic: str, text: str | None) -> None:
        """A peer's ``ends`` field; a malformed one is ignored (it is only evidence)."""
        for (broker, queue_id), end in decode_ends(text).items():
            self.saw(topic, broker, queue_id, end)

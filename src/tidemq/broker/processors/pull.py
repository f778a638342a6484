"""PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361), with long polling.

Status to response mapping (remoting.md §2.8):

=========================  =======================  =======================
store status               response code            nextBeginOffset
=========================  =======================  =======================
FOUND                      SUCCESS                  after the last message
NO_MATCHED_MESSAGE         PULL_RETRY_IMMEDIATELY   after the scanned range
NO_MESSAGE_IN_QUEUE /      PULL_NOT_FOUND if the    0
NO_MATCHED_LOGIC_QUEUE     offset is 0, else
(max == 0)                 PULL_OFFSET_MOVED
NO_MESSAGE_IN_QUEUE        PULL_NOT_FOUND at max,   max
(all expired, min == max)  else PULL_OFFSET_MOVED
OFFSET_TOO_SMALL           PULL_OFFSET_MOVED        min offset
OFFSET_OVERFLOW_ONE        PULL_NOT_FOUND           the requested offset
OFFSET_OVERFLOW_BADLY      PULL_OFFSET_MOVED        max offset
=========================  =======================  =======================

A PULL_NOT_FOUND with the SUSPEND bit on its first evaluation is held by
:class:`~tidemq.broker.holds.HoldTable` instead of answered. Found records go
out as the store's memoryviews (``body_parts``), never joined. Headers are decoded once
per consumer queue (:mod:`~tidemq.broker.processors.pull_headers`).

A tag subscription keeps a BatchCQ inner batch when any of its messages has a subscribed
tag (:class:`~tidemq.broker.inner_tags.InnerBatchTags`); the client keeps exactly those.
"""

from __future__ import annotations

from tidemq.broker.context import BrokerContext
from tidemq.broker.holds import Held
from tidemq.broker.inner_tags import InnerBatchTags
from tidemq.broker.processors.pull_headers import PullHeaders
from tidemq.broker.replication.read_advice import ReadAdvice
from tidemq.broker.topics import PERM_READ
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.errors import RemoteProtocolError, ResponseCode, error_for_code
from tidemq.formats.hashing import tags_code
from tidemq.net import Connection
from tidemq.store.reader import GetResult
from tidemq.types import GetStatus

__all__ = ["PullProcessor", "parse_subscription"]

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4

_NOT_FOUND_STATUSES = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE)
# The members every pull compares with, read once: an attribute of an enum class goes
# through the enum type's ``__getattr__`` hook (Python 3.11), several times slower.
_FOUND, _NO_MATCHED = GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE
_TOO_SMALL, _OVERFLOW_ONE = GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_ONE
_SUCCESS, _NOT_FOUND = ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND
_RETRY, _MOVED = ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED


def parse_subscription(expression: str | None) -> frozenset[int] | None:
    """Tag codes of a TAG expression (``"a || b"``); ``None`` matches everything."""
    if not expression or expression.strip() in ("*", ""):
        return None
    tags = [t.strip() for t in expression.split("||")]
    return frozenset(tags_code(t) for t in tags if t)


class PullProcessor:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self._subs: dict[str, frozenset[int] | None] = {}
        self._headers = PullHeaders()
        self._inner_tags = InnerBatchTags(ctx.config.max_inner_batch_inflated_bytes)
        #: ``suggestWhichBrokerId`` of an answer (``slaveReadEnable``), else always 0.
        self._suggest = ReadAdvice(ctx) if ctx.config.slave_read_enable else None

    def register(self, server: object) -> None:
        for code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
            server.register(code, self.process)  # type: ignore[attr-defined]

    def _tag_codes(self, h: PullMessageRequestHeader, sys_flag: int) -> frozenset[int] | None:
        if sys_flag & FLAG_SUBSCRIPTION:
            expr = h.subscription
        else:
            expr = self.ctx.consumers.subscription(h.consumer_group, h.topic)
        if expr is None:
            return None
        codes = self._subs.get(expr)
        if codes is None and expr not in self._subs:
            if len(self._subs) > 10000:
                self._subs.clear()
            codes = self._subs[expr] = parse_subscription(expr)
        return codes

    def process(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        return self._pull(conn, cmd, first=True)

    def answer_held(self, held: Held) -> None:
        """A held request woken (or timed out): evaluated again and answered."""
        if not held.conn.is_open:
            return
        response = self.rerun(held.conn, held.cmd, held.payload)
        if response is not None:
            held.conn.send_response(response)

    def rerun(self, conn: Connection, cmd: RemotingCommand, parsed: object = None
              ) -> RemotingCommand | None:
        """A held request's final evaluation: never suspends, never commits again.
        ``parsed`` is the header the first evaluation parsed (else it is parsed again)."""
        try:
            return self._pull(conn, cmd, first=False, parsed=parsed)
        except Exception as exc:
            code = getattr(exc, "code", ResponseCode.SYSTEM_ERROR)
            return cmd.response(code, str(exc))

    def _pull(self, conn: Connection, cmd: RemotingCommand, *, first: bool,
              parsed: object = None) -> RemotingCommand | None:
        if isinstance(parsed, PullMessageRequestHeader):
            h = parsed
        else:
            try:
                h = self._headers.decode(cmd.ext_fields)
            except RemoteProtocolError as exc:
                raise error_for_code(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        max_bytes = h.max_msg_bytes if h.max_msg_bytes and h.max_msg_bytes > 0 else (
            self.ctx.config.max_pull_bytes)
        code, nxt, res = self._read(h, h.queue_id, h.queue_offset, h.sys_flag,
                                    max(1, h.max_msg_nums), max_bytes, first)
        offset = h.queue_offset
        if (code == _NOT_FOUND and first and h.sys_flag & FLAG_SUSPEND
                and h.suspend_timeout_millis > 0):
            cfg = self.ctx.config
            timeout = h.suspend_timeout_millis if cfg.long_polling_enable else (
                cfg.short_polling_time_mills)
            self.ctx.holds.hold(conn, cmd, (((h.topic, h.queue_id), offset),), timeout,
                                self.answer_held, h)
            # Close the race with a dispatch that landed between the read and the hold.
            now_max = self.store.max_offset(h.topic, h.queue_id)
            if now_max > offset:
                self.ctx.holds.notify(h.topic, h.queue_id, now_max)
            return None
        return self._answer(cmd, h, code, nxt, res)

    def child(self, cmd: RemotingCommand, h: PullMessageRequestHeader, queue_id: int,
              offset: int, sys_flag: int, max_nums: int, max_bytes: int, *, first: bool
              ) -> tuple[RemotingCommand, int, int, int]:
        """A batch child's pull from its parsed header, never held: what :meth:`process`
        answers for ``cmd`` with ``queueId``, ``queueOffset``, ``sysFlag`` (SUSPEND
        clear), ``maxMsgNums`` >= 1 and ``maxMsgBytes`` > 0 as given, with the messages
        and bytes of records it carries and its ``nextBeginOffset``. The caller counts
        the found messages in the broker's stats (``stats.on_get``, once per parent).
        Raises as :meth:`process` does."""
        code, nxt, res = self._read(h, queue_id, offset, sys_flag, max_nums, max_bytes, first)
        return (self._answer(cmd, h, code, nxt, res, count=False), res.message_count,
                res.total_bytes, nxt)

    def _answer(self, cmd: RemotingCommand, h: PullMessageRequestHeader, code: int, nxt: int,
                res: GetResult, *, count: bool = True) -> RemotingCommand:
        ext = {
            "nextBeginOffset": str(nxt),
            "minOffset": str(res.min_offset),
            "maxOffset": str(res.max_offset),
            "suggestWhichBrokerId": "0" if self._suggest is None else self._suggest(h, res),
        }
        # ``_value_``: the member's value without the ``value`` property's Python call
        resp = cmd.response(code, res.status._value_, ext)
        if code == _SUCCESS:
            resp.body_parts = res.buffers
            if count:
                self.ctx.stats.on_get(h.topic, h.consumer_group, res.message_count,
                                      res.total_bytes)
        return resp

    def _read(self, h: PullMessageRequestHeader, queue_id: int, offset: int, sys_flag: int,
              max_nums: int, max_bytes: int, first: bool) -> tuple[int, int, GetResult]:
        """Check, commit (first evaluation), read: the response code, nextBeginOffset and
        the store's result (status table in the module docstring)."""
        topic = h.topic
        tc = self.ctx.topics.get(topic)
        lmq = self.store.is_lmq(topic)
        if lmq:
            read_queues = 1  # an LMQ is synthetic: one read/write queue, never registered
        elif tc is None:
            raise error_for_code(ResponseCode.TOPIC_NOT_EXIST,
                                 f"topic[{topic}] not exist, apply first please!")
        elif not tc.perm & PERM_READ:
            raise error_for_code(ResponseCode.NO_PERMISSION,
                                 f"the topic[{topic}] pulling is forbidden")
        else:
            read_queues = tc.read_queue_nums
        if not 0 <= queue_id < read_queues:
            raise error_for_code(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{read_queues}]")
        if (first and sys_flag & FLAG_COMMIT_OFFSET
                and 0 <= h.commit_offset <= self.store.max_offset(topic, queue_id)):
            # A commit riding on a pull is best effort: one past the queue is dropped,
            # the pull is still served.
            self.ctx.commit_offset(h.consumer_group, topic, queue_id, h.commit_offset)
        res = self.store.get(topic, queue_id, offset, max_nums, max_bytes,
                             self._tag_codes(h, sys_flag), self._inner_tags)
        status = res.status
        if status is _FOUND:
            code, nxt = _SUCCESS, res.next_begin_offset
            if not lmq:
                self.ctx.pulled.note(h.consumer_group, topic, queue_id, nxt)
        elif status is _NO_MATCHED:
            code, nxt = _RETRY, res.next_begin_offset
        elif status in _NOT_FOUND_STATUSES and res.max_offset > 0:
            # Every message expired (min == max > 0): as upstream, where such a queue is
            # not "empty" -- at max is caught up, anything else moves to max, never to 0.
            code = _NOT_FOUND if offset == res.max_offset else _MOVED
            nxt = res.max_offset
        elif status in _NOT_FOUND_STATUSES:
            code = _NOT_FOUND if offset == 0 else _MOVED
            nxt = 0
        elif status is _TOO_SMALL:
            code, nxt = _MOVED, res.min_offset
        elif status is _OVERFLOW_ONE:
            code, nxt = _NOT_FOUND, offset
        else:
            code, nxt = _MOVED, res.max_offset
        return code, nxt, res

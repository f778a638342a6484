"""Scripted fake name server and broker on tidemq.net.RemotingServer (127.0.0.1, port 0).

They answer the way remoting.md says a real one does, keep messages in memory as real
stored records (so pull/query/view bodies go through the real decoder), record every
request, and can be told to fail: ``broker.fail(code, times=n)`` answers the next ``n``
sends with ``code``.

Consumer groups (§2.6, §2.10, §2.11, §2.13): the broker keeps group members per
connection from heartbeats and notifies them (NOTIFY_CONSUMER_IDS_CHANGED) when that
changes, answers GET_CONSUMER_LIST_BY_GROUP, holds queue locks (``lock_expiry``), stores
sent-back messages in ``%RETRY%<group>`` / ``%DLQ%<group>`` at once (no delay; or fails
them while ``send_back_code`` is set) and can push RESET_CONSUMER_CLIENT_OFFSET
(:meth:`FakeBroker.reset_offsets`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable, Sequence

from tidemq.codec.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumerListBody,
    HeartbeatData,
    KVTable,
    LockBatchRequestBody,
    LockBatchResponseBody,
    QueueData,
    TopicList,
    TopicRouteData,
    decode_body,
    encode_body,
)
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import (
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    decode_send_header,
)
from tidemq.codec.message import decode_messages
from tidemq.errors import ResponseCode, TideMQError
from tidemq.formats.batch import iter_batch
from tidemq.formats.msgid import encode_offset_msg_id
from tidemq.formats.properties import decode_properties, encode_properties
from tidemq.formats.record import encode_record, pack_host
from tidemq.net import Connection, RemotingServer
from tidemq.types import MessageQueue

SEND_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
              RequestCode.SEND_BATCH_MESSAGE)


class RequestLog:
    """Every request a fake received, and a way to wait for one."""

    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []
        self._changed = asyncio.Condition()

    async def add(self, cmd: RemotingCommand) -> None:
        async with self._changed:
            self.requests.append(cmd)
            self._changed.notify_all()

    def of(self, code: int) -> list[RemotingCommand]:
        return [r for r in self.requests if r.code == code]

    async def wait_for(self, code: int, count: int = 1, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.of(code)) >= count)


class _Fake:
    def __init__(self) -> None:
        self.server = RemotingServer("127.0.0.1", 0)
        self.log = RequestLog()

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        await self.server.start()

    async def close(self) -> None:
        await self.server.close(drain_timeout=0.05)

    def on(self, code: int, handler: Callable[[RemotingCommand], object]) -> None:
        async def processor(_conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            await self.log.add(cmd)
            result = handler(cmd)
            if asyncio.iscoroutine(result):
                result = await result
            assert result is None or isinstance(result, RemotingCommand)
            return result

        self.server.register(code, processor)

    def on_conn(self, code: int,
                handler: Callable[[Connection, RemotingCommand], RemotingCommand]) -> None:
        """Like :meth:`on`, for a plain handler that needs the connection too."""

        async def processor(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            await self.log.add(cmd)
            return handler(conn, cmd)

        self.server.register(code, processor)


# ---------------------------------------------------------------- name server


class FakeNameServer(_Fake):
    """Routes set by the test; 105, 106, 206 and 216."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, TopicRouteData] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, list[str]] = {}
        self.on(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        self.on(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        self.on(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._topic_list)
        self.on(RequestCode.DELETE_TOPIC_IN_NAMESRV, self._delete)

    def add_broker(self, broker: FakeBroker, *, slaves: Sequence[str] = ()) -> None:
        addrs = {0: broker.address, **{i + 1: a for i, a in enumerate(slaves)}}
        self.brokers[broker.name] = BrokerData(cluster=broker.cluster, broker_name=broker.name,
                                               broker_addrs=addrs)
        names = self.clusters.setdefault(broker.cluster, [])
        if broker.name not in names:
            names.append(broker.name)

    def add_topic(self, topic: str, brokers: Sequence[FakeBroker], *, queues: int = 4,
                  perm: int = 6, write_queues: int | None = None) -> None:
        for b in brokers:
            if b.name not in self.brokers:
                self.add_broker(b)
            b.topics.setdefault(topic, max(queues, write_queues or 0))
        self.routes[topic] = TopicRouteData(
            queue_datas=[QueueData(broker_name=b.name, read_queue_nums=queues,
                                   write_queue_nums=queues if write_queues is None
                                   else write_queues, perm=perm) for b in brokers],
            broker_datas=[self.brokers[b.name] for b in brokers],
        )

    def _route(self, cmd: RemotingCommand) -> RemotingCommand:
        route = self.routes.get(cmd.ext_fields["topic"])
        if route is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, "No topic route info")
        return cmd.response(body=encode_body(route))

    def _cluster_info(self, cmd: RemotingCommand) -> RemotingCommand:
        info = ClusterInfo(broker_addr_table=dict(self.brokers),
                           cluster_addr_table={c: list(n) for c, n in self.clusters.items()})
        return cmd.response(body=encode_body(info))

    def _topic_list(self, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=encode_body(TopicList(topic_list=sorted(self.routes))))

    def _delete(self, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.pop(cmd.ext_fields["topic"], None)
        return cmd.response()


# ---------------------------------------------------------------- broker


@dataclasses.dataclass
class Stored:
    phys: int
    record: bytes
    props: dict[str, str]
    store_time: int


class FakeBroker(_Fake):
    """An in-memory broker: sends, long-polling pulls, offsets, topics, lookups."""

    def __init__(self, name: str, cluster: str = "DefaultCluster") -> None:
        super().__init__()
        self.name = name
        self.cluster = cluster
        self.topics: dict[str, int] = {}
        self.queues: dict[tuple[str, int], list[Stored]] = {}
        self.min_offsets: dict[tuple[str, int], int] = {}
        self.by_phys: dict[int, Stored] = {}
        self.phys = 0
        self.clock = 1_700_000_000_000
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.heartbeats: list[HeartbeatData] = []
        self.auto_create = True
        self._failures: list[int] = []
        self.fail_always: int | None = None
        self.parked = 0
        self._arrived = asyncio.Condition()
        for code in SEND_CODES:
            self.on(code, self._send)
        self.on(RequestCode.PULL_MESSAGE, self._pull)
        self.on(RequestCode.QUERY_CONSUMER_OFFSET, self._query_offset)
        self.on(RequestCode.UPDATE_CONSUMER_OFFSET, self._update_offset)
        self.on(RequestCode.GET_MAX_OFFSET, lambda c: self._offset(c, max_=True))
        self.on(RequestCode.GET_MIN_OFFSET, lambda c: self._offset(c, max_=False))
        self.on(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self._search)
        self.on(RequestCode.GET_EARLIEST_MSG_STORETIME, self._earliest)
        self.on_conn(RequestCode.HEART_BEAT, self._heartbeat)
        self.on(RequestCode.UNREGISTER_CLIENT, self._unregister)
        self.on(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self._consumer_list)
        self.on(RequestCode.LOCK_BATCH_MQ, self._lock)
        self.on(RequestCode.UNLOCK_BATCH_MQ, self._unlock)
        self.on(RequestCode.CONSUMER_SEND_MSG_BACK, self._send_back)
        #: group -> client id -> connection, from heartbeats.
        self.members: dict[str, dict[str, Connection]] = {}
        #: (group, queue) -> (client id, expiry on the loop clock).
        self.locks: dict[tuple[str, MessageQueue], tuple[str, float]] = {}
        self.lock_expiry = 60.0
        #: While set, CONSUMER_SEND_MSG_BACK is answered with this code.
        self.send_back_code: int | None = None
        self.notifications = 0
        self._notes: set[asyncio.Task[None]] = set()
        self.on(RequestCode.UPDATE_AND_CREATE_TOPIC, self._create_topic)
        self.on(RequestCode.DELETE_TOPIC_IN_BROKER, self._delete_topic)
        self.on(RequestCode.QUERY_MESSAGE, self._query)
        self.on(RequestCode.VIEW_MESSAGE_BY_ID, self._view)
        self.on(RequestCode.GET_BROKER_RUNTIME_INFO, self._runtime)

    def fail(self, code: int, times: int = 1) -> None:
        """Answer the next ``times`` sends with ``code``."""
        self._failures.extend([code] * times)

    # ------------------------------------------------------------------ storage

    def max_offset(self, topic: str, qid: int) -> int:
        return self.min_offsets.get((topic, qid), 0) + len(self.queues.get((topic, qid), []))

    def min_offset(self, topic: str, qid: int) -> int:
        return self.min_offsets.get((topic, qid), 0)

    def truncate(self, topic: str, qid: int, new_min: int) -> None:
        """Drop messages below ``new_min`` (retention)."""
        key = (topic, qid)
        drop = new_min - self.min_offset(topic, qid)
        self.queues[key] = self.queues.get(key, [])[drop:]
        self.min_offsets[key] = new_min

    def stored(self, topic: str, qid: int) -> list[Stored]:
        return self.queues.get((topic, qid), [])

    async def put(self, topic: str, qid: int, body: bytes, props: dict[str, str],
                  flag: int = 0, sys_flag: int = 0, born: int = 0,
                  reconsume: int = 0) -> tuple[str, int]:
        """Store one message; returns (offset msg id, queue offset)."""
        key = (topic, qid)
        offset = self.max_offset(topic, qid)
        self.clock += 10
        record = bytes(encode_record(
            topic=topic.encode(), queue_id=qid, body=body, properties=encode_properties(props),
            flag=flag, sys_flag=sys_flag, born_timestamp=born, store_host=pack_host(self.address),
            store_timestamp=self.clock, queue_offset=offset, physical_offset=self.phys,
            reconsume_times=reconsume,
        ))
        stored = Stored(self.phys, record, props, self.clock)
        self.queues.setdefault(key, []).append(stored)
        self.by_phys[self.phys] = stored
        msg_id = encode_offset_msg_id(pack_host(self.address), self.phys)
        self.phys += len(record)
        async with self._arrived:
            self._arrived.notify_all()
        return msg_id, offset

    # ------------------------------------------------------------------ handlers

    async def _send(self, cmd: RemotingCommand) -> RemotingCommand:
        if self._failures or self.fail_always is not None:
            code = self._failures.pop(0) if self._failures else self.fail_always
            assert code is not None
            return cmd.response(code, "scripted failure")
        h: SendMessageRequestHeader = decode_send_header(cmd.code, cmd.ext_fields)
        if h.topic not in self.topics:
            if not (self.auto_create and h.default_topic == "TBW102"):
                return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} unknown")
            self.topics[h.topic] = min(h.default_topic_queue_nums, 8)
        qid = h.queue_id if h.queue_id >= 0 else 0
        if qid >= self.topics[h.topic]:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"queueId {qid} out of range")
        body = cmd.full_body()
        if h.batch:
            entries = [(bytes(e.body), decode_properties(e.properties), e.flag)
                       for e in iter_batch(body)]
        else:
            entries = [(body, decode_properties((h.properties or "").encode()), h.flag)]
        ids, first = [], -1
        for entry_body, props, flag in entries:
            msg_id, offset = await self.put(h.topic, qid, entry_body, props, flag, h.sys_flag,
                                            h.born_timestamp, h.reconsume_times or 0)
            ids.append(msg_id)
            first = offset if first < 0 else first
        ext = {"msgId": ",".join(ids), "queueId": str(qid), "queueOffset": str(first),
               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        return cmd.response(ext_fields=ext)

    def _evaluate(self, h: PullMessageRequestHeader) -> RemotingCommand:
        lo, hi = self.min_offset(h.topic, h.queue_id), self.max_offset(h.topic, h.queue_id)
        off = h.queue_offset

        def answer(code: int, next_offset: int, body: bytes = b"") -> RemotingCommand:
            ext = {"nextBeginOffset": str(next_offset), "minOffset": str(lo),
                   "maxOffset": str(hi), "suggestWhichBrokerId": "0"}
            return RemotingCommand(code=code, ext_fields=ext, body=body)

        if hi == 0:
            return answer(ResponseCode.PULL_NOT_FOUND if off == 0
                          else ResponseCode.PULL_OFFSET_MOVED, 0)
        if off < lo:
            return answer(ResponseCode.PULL_OFFSET_MOVED, lo)
        if off > hi:
            return answer(ResponseCode.PULL_OFFSET_MOVED, hi)
        if off == hi:
            return answer(ResponseCode.PULL_NOT_FOUND, off)
        found = self.stored(h.topic, h.queue_id)[off - lo: off - lo + h.max_msg_nums]
        return answer(ResponseCode.SUCCESS, off + len(found),
                      b"".join(s.record for s in found))

    async def _pull(self, cmd: RemotingCommand) -> RemotingCommand:
        h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
        result = self._evaluate(h)
        if result.code == ResponseCode.PULL_NOT_FOUND and h.sys_flag & 0x2:
            self.parked += 1
            async with self._arrived:
                self._arrived.notify_all()  # lets tests see the park
                try:
                    async with asyncio.timeout(h.suspend_timeout_millis / 1000):
                        await self._arrived.wait_for(
                            lambda: self.max_offset(h.topic, h.queue_id) > h.queue_offset)
                except TimeoutError:
                    pass
            result = self._evaluate(h)
        response = cmd.response(result.code, None, result.ext_fields, result.body)
        return response

    async def wait_parked(self, count: int = 1) -> None:
        """Wait until ``count`` pulls have been held for long polling."""
        async with asyncio.timeout(5), self._arrived:
            await self._arrived.wait_for(lambda: self.parked >= count)

    def _query_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        offset = self.offsets.get((h.consumer_group, h.topic, h.queue_id))
        if offset is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found")
        return cmd.response(ext_fields={"offset": str(offset)})

    def _update_offset(self, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        self.offsets[(h.consumer_group, h.topic, h.queue_id)] = h.commit_offset
        return cmd.response()

    def _offset(self, cmd: RemotingCommand, *, max_: bool) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(cmd.ext_fields)
        value = (self.max_offset if max_ else self.min_offset)(h.topic, h.queue_id)
        return cmd.response(ext_fields={"offset": str(value)})

    def _search(self, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        lo = self.min_offset(h.topic, h.queue_id)
        for i, s in enumerate(self.stored(h.topic, h.queue_id)):
            if s.store_time >= h.timestamp:
                return cmd.response(ext_fields={"offset": str(lo + i)})
        return cmd.response(ext_fields={"offset": str(self.max_offset(h.topic, h.queue_id))})

    def _earliest(self, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(cmd.ext_fields)
        stored = self.stored(h.topic, h.queue_id)
        ts = stored[0].store_time if stored else -1
        return cmd.response(ext_fields={"timestamp": str(ts)})

    # ------------------------------------------------------------------ groups

    def _heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = decode_body(cmd.full_body(), HeartbeatData)
        self.heartbeats.append(data)
        for consumer in data.consumer_data_set:
            members = self.members.setdefault(consumer.group_name, {})
            if members.get(data.client_id) is not conn:
                if data.client_id not in members:
                    conn.on_close(lambda c, _e, g=consumer.group_name, cid=data.client_id:
                                  self._left(g, cid, c))
                members[data.client_id] = conn
                self._notify(consumer.group_name)
        return cmd.response(ext_fields={"IS_SUPPORT_HEART_BEAT_V2": "true"})

    def _left(self, group: str, client_id: str, conn: Connection) -> None:
        members = self.members.get(group, {})
        if members.get(client_id) is conn:
            del members[client_id]
            self._notify(group)

    def _notify(self, group: str) -> None:
        self.notifications += 1
        for conn in self.members.get(group, {}).values():
            if conn.is_open:
                note = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                               {"consumerGroup": group}, oneway=True)
                task = asyncio.ensure_future(self._oneway(conn, note))
                self._notes.add(task)
                task.add_done_callback(self._notes.discard)

    @staticmethod
    async def _oneway(conn: Connection, cmd: RemotingCommand) -> None:
        with contextlib.suppress(TideMQError):
            await conn.oneway(cmd)

    def _unregister(self, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup")
        if group and self.members.get(group, {}).pop(cmd.ext_fields["clientID"], None):
            self._notify(group)
        return cmd.response()

    def _consumer_list(self, cmd: RemotingCommand) -> RemotingCommand:
        ids = sorted(self.members.get(cmd.ext_fields["consumerGroup"], {}))
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no consumer for this group")
        return cmd.response(body=encode_body(ConsumerListBody(consumer_id_list=ids)))

    def _lock(self, cmd: RemotingCommand) -> RemotingCommand:
        body = decode_body(cmd.full_body(), LockBatchRequestBody)
        now = asyncio.get_running_loop().time()
        granted = []
        for data in body.mq_set:
            key = (body.consumer_group, data.to_queue())
            holder = self.locks.get(key)
            if holder is None or holder[0] == body.client_id or holder[1] < now:
                self.locks[key] = (body.client_id, now + self.lock_expiry)
                granted.append(data)
        return cmd.response(body=encode_body(LockBatchResponseBody(lock_ok_mq_set=granted)))

    def _unlock(self, cmd: RemotingCommand) -> RemotingCommand:
        body = decode_body(cmd.full_body(), LockBatchRequestBody)
        for data in body.mq_set:
            key = (body.consumer_group, data.to_queue())
            if self.locks.get(key, ("",))[0] == body.client_id:
                del self.locks[key]
        return cmd.response()

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        held = self.locks.get((group, mq))
        return held[0] if held is not None else None

    async def _send_back(self, cmd: RemotingCommand) -> RemotingCommand:
        if self.send_back_code is not None:
            return cmd.response(self.send_back_code, "scripted send-back failure")
        h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
        stored = self.by_phys.get(h.offset)
        if stored is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no message at that offset")
        [original] = decode_messages(stored.record)
        props = dict(stored.props)
        props.setdefault("RETRY_TOPIC", original.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", h.origin_msg_id or original.msg_id)
        times = original.reconsume_times
        limit = h.max_reconsume_times if h.max_reconsume_times is not None else 16
        target = f"%DLQ%{h.group}" if times >= limit or h.delay_level < 0 \
            else f"%RETRY%{h.group}"
        self.topics.setdefault(target, 1)
        await self.put(target, 0, bytes(original.body), props, reconsume=times + 1)
        return cmd.response()

    async def reset_offsets(self, group: str, offsets: dict[MessageQueue, int]) -> int:
        """Send RESET_CONSUMER_CLIENT_OFFSET to every member of ``group``; how many."""
        body = json.dumps({"offsetTable": [
            {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
             "offset": off} for mq, off in offsets.items()]}).encode()
        sent = 0
        for conn in self.members.get(group, {}).values():
            cmd = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                                          {"topic": next(iter(offsets)).topic, "group": group,
                                           "timestamp": "0", "isForce": "true"}, body)
            response = await conn.request(cmd, 3.0)
            assert response.code == ResponseCode.SUCCESS, response.remark
            sent += 1
        return sent

    def _create_topic(self, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        self.topics[h.topic] = max(h.read_queue_nums, h.write_queue_nums)
        return cmd.response()

    def _delete_topic(self, cmd: RemotingCommand) -> RemotingCommand:
        self.topics.pop(cmd.ext_fields["topic"], None)
        return cmd.response()

    def _query(self, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(cmd.ext_fields)
        hits = [s for (topic, _), stored in sorted(self.queues.items()) if topic == h.topic
                for s in stored
                if (s.props.get("UNIQ_KEY") == h.key if h.unique_key_query
                    else h.key in s.props.get("KEYS", "").split(" "))]
        if not hits:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "no message")
        ext = {"indexLastUpdateTimestamp": str(self.clock), "indexLastUpdatePhyoffset": "0"}
        return cmd.response(ext_fields=ext, body=b"".join(s.record for s in hits[:h.max_num]))

    def _view(self, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(cmd.ext_fields)
        stored = self.by_phys.get(h.offset)
        if stored is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "can not find message by the offset")
        return cmd.response(body=stored.record)

    def _runtime(self, cmd: RemotingCommand) -> RemotingCommand:
        table = KVTable(table={"brokerVersion": "479", "msgPutTotalTodayNow": str(
            sum(len(q) for q in self.queues.values()))})
        return cmd.response(body=encode_body(table))


def hold_commit_answer(broker: FakeBroker, offset: int) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold the answer to the first commit of ``offset`` (stored at once) until the second
    event is set; the first is set when it is held."""
    held, release = asyncio.Event(), asyncio.Event()
    store = broker._update_offset

    async def late_answer(cmd: RemotingCommand) -> RemotingCommand:
        response = store(cmd)
        if cmd.ext_fields["commitOffset"] == str(offset) and not held.is_set():
            held.set()
            await release.wait()
        return response

    broker.on(RequestCode.UPDATE_CONSUMER_OFFSET, late_answer)
    return held, release


"""Long polling over real TCP (remoting.md §2.8): a held pull is answered by the next
message or by its timeout, with the request's own opaque, and never leaks.

A pull is known to be held once a later request on the same connection has been
answered: the broker reads frames in order and the pull processor runs inline.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import pytest
from tests.broker import wire
from tests.broker.wire import PULL_SUSPEND, Peer

from tidemq.broker.app import BrokerApp
from tidemq.codec.batch_protocol import decode_batch_response, encode_batch_request
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.codec.message import decode_messages
from tidemq.errors import ConnectionLost, ResponseCode
from tidemq.net import Connection
from tidemq.testing import Cluster


def held_pull(topic: str, offset: int, *, suspend_ms: int = 10_000, group: str = "cg",
              subscription: str | None = None) -> RemotingCommand:
    return wire.pull(topic, 0, offset, sys_flag=PULL_SUSPEND, suspend_ms=suspend_ms,
                     group=group, subscription=subscription)


async def park(peer: Peer, cmd: RemotingCommand) -> asyncio.Task[RemotingCommand]:
    """Send ``cmd`` and return once the broker has read it (see the module docstring)."""
    task = asyncio.ensure_future(peer(cmd, timeout=30.0))
    await peer.ok(wire.request(RequestCode.GET_MAX_OFFSET, topic="LP", queueId=0))
    assert not task.done()
    return task


async def test_held_pull_is_answered_by_the_next_message(cluster: Cluster, peer: Peer) -> None:
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("LP", 1))
    task = await park(peer, held_pull("LP", 0))
    assert broker.pull_holds.held_count == 1
    await peer.ok(wire.send("LP", b"wake"))
    resp = await asyncio.wait_for(task, 5)
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_messages(resp.full_body())] == [b"wake"]
    assert broker.pull_holds.held_count == 0


async def test_a_round_applied_by_the_send_answers_the_held_pull(cluster: Cluster,
                                                                  peer: Peer) -> None:
    """The dispatch thread asleep (ASYNC_FLUSH): the send's own round, applied on the
    loop by its append, wakes the held pull from the loop, and the thread sleeps on."""
    broker = cluster.brokers[0]
    dispatcher = broker.store.dispatcher
    assert dispatcher is not None and dispatcher.on_append_records
    threads: list[int] = []
    broker.store.add_dispatch_round_hook(lambda touched: threads.append(threading.get_ident()))
    await peer.ok(wire.create_topic("LP", 1))
    for offset in range(3):
        task = await park(peer, held_pull("LP", offset))
        deadline = time.monotonic() + 10
        while not dispatcher.idle:  # a flag: no event tells when the thread sleeps
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        rounds, threads[:] = dispatcher.rounds_on_append, []
        await peer.ok(wire.send("LP", b"on append %d" % offset))
        resp = await asyncio.wait_for(task, 5)
        assert resp.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(resp.full_body())] == [b"on append %d" % offset]
        assert dispatcher.rounds_on_append == rounds + 1
        assert threads == [threading.get_ident()]  # the loop's thread, the test's
        assert dispatcher.idle


async def test_wake_up_latency(cluster: Cluster, peer: Peer) -> None:
    """Send -> held pull answered, over 50 rounds; printed, asserted only loosely (the
    machine is shared)."""
    await peer.ok(wire.create_topic("LP", 1))
    async with Peer(cluster.brokers[0].broker_addr) as producer:
        await producer.ok(wire.send("Warm", b"w"))
        samples = []
        for offset in range(50):
            task = await park(peer, held_pull("LP", offset))
            start = time.perf_counter()
            await producer.ok(wire.send("LP", b"x"))
            resp = await asyncio.wait_for(task, 5)
            samples.append((time.perf_counter() - start) * 1000)
            assert resp.code == ResponseCode.SUCCESS
            assert int(resp.ext_fields["nextBeginOffset"]) == offset + 1
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    print(f"long-poll wake-up latency over {len(samples)} rounds: "
          f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {samples[-1]:.2f} ms")
    assert p50 < 100
    assert p99 < 500


async def test_held_pull_times_out_with_pull_not_found(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("LP", 1))
    await peer.ok(wire.send("LP"))
    await wire.dispatched(cluster.brokers[0])
    start = time.monotonic()
    task = await park(peer, held_pull("LP", 1, suspend_ms=300))
    resp = await asyncio.wait_for(task, 5)
    assert time.monotonic() - start >= 0.28
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert resp.ext_fields["nextBeginOffset"] == "1"
    assert cluster.brokers[0].pull_holds.held_count == 0


async def test_pull_without_suspend_flag_is_answered_at_once(peer: Peer) -> None:
    await peer.ok(wire.create_topic("LP", 1))
    resp = await peer(wire.pull("LP", 0, 0, suspend_ms=10_000))
    assert resp.code == ResponseCode.PULL_NOT_FOUND


async def test_one_message_wakes_every_pull_held_on_the_queue(cluster: Cluster,
                                                              peer: Peer) -> None:
    await peer.ok(wire.create_topic("LP", 1))
    tasks = [await park(peer, held_pull("LP", 0, group=f"g{i}")) for i in range(5)]
    assert cluster.brokers[0].pull_holds.held_count == 5
    await peer.ok(wire.send("LP", b"all"))
    for resp in await asyncio.wait_for(asyncio.gather(*tasks), 5):
        assert resp.code == ResponseCode.SUCCESS


async def test_held_pull_on_other_queue_is_not_woken(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("LP", 2))
    task = await park(peer, held_pull("LP", 0, suspend_ms=400))
    await peer.ok(wire.send("LP", queue_id=1))
    resp = await asyncio.wait_for(task, 5)
    assert resp.code == ResponseCode.PULL_NOT_FOUND


async def test_held_pull_woken_by_unmatched_tag_retries_immediately(cluster: Cluster,
                                                                    peer: Peer) -> None:
    await peer.ok(wire.create_topic("LP", 1))
    task = await park(peer, held_pull("LP", 0, subscription="wanted"))
    await peer.ok(wire.send("LP", properties=wire.props(tags="other")))
    resp = await asyncio.wait_for(task, 5)
    assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert resp.ext_fields["nextBeginOffset"] == "1"


async def test_closed_connection_drops_its_held_pulls(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_closed(conn: Connection, error: ConnectionLost) -> None:
        if not closed.done():
            closed.set_result(None)

    broker.server.on_connection_closed(on_closed)
    async with Peer(broker.broker_addr) as peer:
        await peer.ok(wire.create_topic("LP", 1))
        task = await park(peer, held_pull("LP", 0))
        assert broker.pull_holds.held_count == 1
    await asyncio.wait_for(closed, 5)
    assert broker.pull_holds.held_count == 0
    assert task.done()
    assert isinstance(task.exception(), ConnectionLost)


async def test_broker_shutdown_answers_held_pulls(cluster: Cluster, peer: Peer) -> None:
    await peer.ok(wire.create_topic("LP", 1))
    task = await park(peer, held_pull("LP", 0, suspend_ms=20_000))
    broker: BrokerApp = cluster.brokers[0]
    await broker.stop()
    resp = await asyncio.wait_for(task, 5)
    assert resp.code == ResponseCode.PULL_NOT_FOUND


async def test_a_woken_pull_is_answered_from_the_header_parsed_when_it_was_held(
        cluster: Cluster, peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The final evaluation reuses the first one's parsed header: no second parse."""
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("LP", 1))
    task = await park(peer, held_pull("LP", 0))
    parses: list[object] = []
    real = PullMessageRequestHeader.from_ext.__func__  # type: ignore[attr-defined]

    def counting(cls: type[PullMessageRequestHeader], ext: dict[str, str]
                 ) -> PullMessageRequestHeader:
        parses.append(ext)
        return real(cls, ext)  # type: ignore[no-any-return]

    monkeypatch.setattr(PullMessageRequestHeader, "from_ext", classmethod(counting))
    await peer.ok(wire.send("LP", b"wake"))
    resp = await asyncio.wait_for(task, 5)
    assert [m.body for m in decode_messages(resp.full_body())] == [b"wake"]
    assert parses == [] and broker.pull_holds.held_count == 0


async def test_single_pulls_and_batch_parents_wait_in_one_table(
        cluster: Cluster, peer: Peer) -> None:
    """A held pull and a held batch-protocol parent on the same queue: one table counts
    both, one message wakes both, a closed connection's holds are forgotten."""
    broker = cluster.brokers[0]
    await peer.ok(wire.create_topic("LP", 2))
    single = await park(peer, held_pull("LP", 0))
    kids = [wire.pull("LP", q, 0, sys_flag=PULL_SUSPEND, suspend_ms=10_000) for q in (0, 1)]
    parent = await park(peer, encode_batch_request(RequestCode.PULL_MESSAGE, kids))
    closed = asyncio.Event()
    broker.server.on_connection_closed(lambda conn, error: closed.set())
    async with Peer(broker.broker_addr) as other:  # a third, dropped with its connection
        dropped = await park(other, held_pull("LP", 0))
        assert broker.pull_holds.held_count == 3
    with pytest.raises(ConnectionLost):
        await dropped
    await asyncio.wait_for(closed.wait(), 5)  # the broker saw the close
    assert broker.pull_holds.held_count == 2
    await peer.ok(wire.send("LP", b"both", queue_id=0))
    got = decode_batch_response(await asyncio.wait_for(parent, 5), [1, 2])
    assert [r.code for r in got] == [ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND]
    assert (await asyncio.wait_for(single, 5)).code == ResponseCode.SUCCESS
    assert broker.pull_holds.held_count == 0 and broker.pull_holds.woken == 2

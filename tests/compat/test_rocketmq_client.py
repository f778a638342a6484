"""A real third-party RocketMQ client against TideMQ: ``rocketmq`` 0.4.4, the ctypes
wrapper around Apache's C++ client (remoting.md §5). Each scenario runs in a subprocess
(tests/compat/rocketmq_scenarios.py), since a native crash kills the interpreter; the
test serves the cluster in-process meanwhile and asserts on the scenario's JSON and on
what the brokers stored, read back over the wire.

What this client does differently from Java (§5.3): code 10 with V1 keys for everything,
``batch:"1"`` for batches, ext values sometimes as JSON numbers, heartbeat bodies with enum
ordinals and a trailing newline, and it never sets the oneway bit.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.broker import wire
from tests.broker.wire import Peer

from tidemq.codec.command import RequestCode
from tidemq.testing import Cluster
from tidemq.types import MessageExt

pytest.importorskip("rocketmq")

SCRIPT = Path(__file__).with_name("rocketmq_scenarios.py")
SCENARIOS = pytest.importorskip("tests.compat.rocketmq_scenarios")
BIG_BODY = SCENARIOS.BIG_BODY
#: What the C++ client logs for each failed attempt of a send it then retries itself.
SEND_ATTEMPT_FAILED = "send failed of times"


#: Sends the current test retried during a producer's warm-up.
CLIENT_RACES: list[str] = []


@pytest.fixture(autouse=True)
def report_client_races(capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Print, past the capture, every send the current test retried."""
    CLIENT_RACES.clear()
    yield
    if CLIENT_RACES:
        with capsys.disabled():
            print(f"\nretried while opening the C++ client's connections: {CLIENT_RACES}")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Two brokers; every delay level is 1 s so retries come back quickly."""
    levels = " ".join(["1s"] * 18)
    async with Cluster(tmp_path / "cluster", brokers=2,
                       broker={"message_delay_level": levels}) as c:
        await ready(c, SCENARIOS.WARM_UP_TOPIC)  # every scenario's producer sends there first
        yield c


async def scenario(cluster: Cluster, home: Path, *args: object,
                   refused: bool = False) -> dict[str, Any]:
    """Run one scenario against ``cluster``; its JSON result (the process must exit 0).
    ``refused``: its sends are meant to fail, so the client's own retries are expected."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), str(args[0]), cluster.namesrv_addr,
        *map(str, args[1:]), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "HOME": str(home)})  # the C++ client logs under $HOME/logs
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    lines = out.decode().strip().splitlines()
    assert proc.returncode == 0 and lines, (proc.returncode, out[-2000:], err[-4000:])
    result: dict[str, Any] = json.loads(lines[-1])
    # A send that failed and then succeeded on a retry is not a silent pass: it fails the
    # test, unless it was the warm-up that opens the client's connections (reported).
    retried = result.pop("retried")
    assert all(r["warm_up"] for r in retried), (retried, err[-4000:])
    CLIENT_RACES.extend(f"{args[0]}: {r['error']}" for r in retried)
    # The client also retries inside one send call, logging each failed attempt.
    attempts = failed_attempts(home, proc.pid)
    late = [text for text, warm_up in attempts if not warm_up]
    if late and not refused:
        pytest.fail("the C++ client retried failed sends:\n\n" + "\n\n".join(late),
                    pytrace=False)
    CLIENT_RACES.extend(f"{args[0]}: {text.splitlines()[-1]}" for text, _ in attempts)
    return result


def failed_attempts(home: Path, pid: int) -> list[tuple[str, bool]]:
    """The send attempts process ``pid``'s C++ client logged as failed (with the lines
    before each), and whether each was one of the warm-up's."""
    out = []
    for log in sorted((home / "logs" / "rocketmq-cpp").glob(f"{pid}_*")):
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if SEND_ATTEMPT_FAILED in line:
                out.append(("\n".join(lines[max(0, i - 6):i + 1]),
                            f"topic={SCENARIOS.WARM_UP_TOPIC}," in line))
    return out


async def stored(cluster: Cluster, topic: str) -> list[MessageExt]:
    """Every message of ``topic`` on every broker, read over the wire (``broker_name``
    set to the broker it came from)."""
    out = []
    for broker in cluster.brokers:
        await wire.dispatched(broker)
        tc = broker.topics.get(topic)
        if tc is None:
            continue
        async with Peer(broker.broker_addr) as peer:
            for qid in range(tc.read_queue_nums):
                if await peer.max_offset(topic, qid):
                    for m in await peer.messages(topic, qid, 0):
                        m.broker_name = broker.config.broker_name
                        out.append(m)
    return out


async def eventually_stored(cluster: Cluster, topic: str, count: int) -> list[MessageExt]:
    """What :func:`stored` returns once it holds ``count`` messages (oneway and delayed
    messages arrive with no answer to wait for; bounded)."""
    msgs: list[MessageExt] = []
    try:
        async with asyncio.timeout(20):
            while len(msgs := await stored(cluster, topic)) < count:
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"{len(msgs)} of {count} stored: {msgs}") from None
    return msgs


async def ready(cluster: Cluster, topic: str, queues: int = 2) -> None:
    """Create ``topic`` on every broker and wait until the name server routes all of them:
    the C++ client looks routes up again only every few seconds."""
    for broker in cluster.brokers:
        async with Peer(broker.broker_addr) as peer:
            await peer.ok(wire.create_topic(topic, queues))
    async with Peer(cluster.namesrv_addr) as ns:
        await wire.eventually_route(ns, topic,
                                    lambda r: len(r.queue_datas) == len(cluster.brokers))


async def test_send_sync_to_an_auto_created_topic(cluster: Cluster, tmp_path: Path) -> None:
    result = await scenario(cluster, tmp_path, "send_sync", "CppAuto", "pg", 4)
    sent = result["sent"]
    assert [s["status"] for s in sent] == ["OK"] * 4
    msgs = await stored(cluster, "CppAuto")
    assert sorted(m.body for m in msgs) == [f"body-{i}".encode() for i in range(4)]
    by_body = {m.body.decode(): m for m in msgs}
    for i, s in enumerate(sent):
        m = by_body[f"body-{i}"]
        assert (m.keys, m.tags) == ([f"key-{i}"], f"tag{i % 2}")
        assert m.uniq_key == s["msg_id"]  # the C++ client reports the UNIQ_KEY
        assert m.properties["CLUSTER"] == "DefaultCluster"
    # Created from TBW102 with the client's 4 queues, on the brokers the sends reached.
    created = [tc for b in cluster.brokers if (tc := b.topics.get("CppAuto")) is not None]
    assert created and all(tc.write_queue_nums == 4 for tc in created)


async def test_send_batch_with_batch_flag_1(cluster: Cluster, tmp_path: Path) -> None:
    result = await scenario(cluster, tmp_path, "send_batch", "CppBatch", "pg", 3)
    assert result["status"] == "OK"
    msgs = await stored(cluster, "CppBatch")
    assert [m.body for m in msgs] == [b"body-0", b"body-1", b"body-2"]
    assert len({m.queue_id for m in msgs}) == 1
    first = msgs[0].queue_offset
    assert [m.queue_offset for m in msgs] == [first, first + 1, first + 2]
    assert result["offset"] == first
    assert len({m.uniq_key for m in msgs}) == 3  # each entry keeps its own UNIQ_KEY
    assert [m.keys for m in msgs] == [["key-0"], ["key-1"], ["key-2"]]


async def _prefill(cluster: Cluster, topic: str, n: int) -> list[MessageExt]:
    await ready(cluster, topic)
    async with Peer(cluster.brokers[0].broker_addr) as peer:
        for i in range(n):
            await peer.ok(wire.send(topic, f"body-{i}".encode(), code=RequestCode.SEND_MESSAGE,
                                    queue_id=i % 2,
                                    properties=wire.props(tags=f"tag{i % 2}", keys=f"key-{i}")))
    return await stored(cluster, topic)


@pytest.mark.parametrize(("expression", "tags"), [("*", {"tag0", "tag1"}), ("tag1", {"tag1"})])
async def test_pull_consumer(cluster: Cluster, tmp_path: Path, expression: str,
                             tags: set[str]) -> None:
    expected = [m for m in await _prefill(cluster, "CppPull", 6) if m.tags in tags]
    result = await scenario(cluster, tmp_path, "pull", "CppPull", "cg", 32, expression)
    got = result["messages"]
    assert sorted((d["queue_id"], d["queue_offset"], d["body"], d["tags"], d["keys"],
                   d["commit_log_offset"], d["id"]) for d in got) == sorted(
        (m.queue_id, m.queue_offset, m.body.decode(), m.tags, m.keys[0], m.commit_log_offset,
         m.msg_id) for m in expected)


async def test_push_consumer(cluster: Cluster, tmp_path: Path) -> None:
    await ready(cluster, "CppPush")
    result = await scenario(cluster, tmp_path, "push", "CppPush", "pushg", 4)
    got = result["messages"]
    assert sorted(d["body"] for d in got) == [f"body-{i}" for i in range(4)]
    assert all(d["reconsume_times"] == 0 for d in got)
    # The consumer committed what it consumed before it left.
    committed = 0
    for broker in cluster.brokers:
        committed += sum(broker.offsets.offsets("pushg", "CppPush").values())
    assert committed == 4


async def test_failed_consumption_is_retried_through_send_back(cluster: Cluster,
                                                              tmp_path: Path) -> None:
    await ready(cluster, "CppRetry")
    async with Peer(cluster.brokers[0].broker_addr) as peer:  # the retry topic and its route
        await peer.ok(wire.heartbeat("warmup", consumer_groups={"retryg": {"CppRetry": "*"}}))
        await peer.ok(wire.request(RequestCode.UNREGISTER_CLIENT, clientID="warmup",
                                   consumerGroup="retryg"))
    async with Peer(cluster.namesrv_addr) as ns:
        await wire.eventually_route(ns, "%RETRY%retryg")
    result = await scenario(cluster, tmp_path, "retry", "CppRetry", "retryg", 2)
    got = result["messages"]
    assert sorted(d["body"] for d in got) == ["body-0", "body-1"]
    assert all(d["reconsume_times"] >= 1 for d in got)


async def test_send_oneway(cluster: Cluster, tmp_path: Path) -> None:
    await ready(cluster, "CppOneway")
    result = await scenario(cluster, tmp_path, "send_oneway", "CppOneway", "owg", 6)
    assert result["sent"] == 6
    msgs = await eventually_stored(cluster, "CppOneway", 6)
    assert sorted(m.body for m in msgs) == [f"body-{i}".encode() for i in range(6)]
    assert sorted(m.keys[0] for m in msgs) == [f"key-{i}" for i in range(6)]


async def test_send_async(cluster: Cluster, tmp_path: Path) -> None:
    await ready(cluster, "CppAsync")
    result = await scenario(cluster, tmp_path, "send_async", "CppAsync", "asg", 8)
    assert result["completed"] and result["errors"] == []
    assert [r["status"] for r in result["results"]] == ["OK"] * 8
    msgs = await stored(cluster, "CppAsync")
    assert sorted(m.body for m in msgs) == [f"body-{i}".encode() for i in range(8)]
    assert sorted(m.uniq_key for m in msgs) == sorted(r["msg_id"] for r in result["results"])


async def test_user_properties_delay_level_and_a_compressed_body(cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    await ready(cluster, "CppFeatures")
    result = await scenario(cluster, tmp_path, "features", "CppFeatures", "featg")
    assert [s["status"] for s in result["sent"]] == ["OK"] * 3
    got = {d["body"][:6]: d for d in result["messages"]}
    assert sorted(got) == ["big:01", "body-0", "body-1"]
    assert got["body-0"]["properties"] == {"color": "blue", "size": "L", "DELAY": "",
                                           "REAL_TOPIC": ""}
    # Delivered from the schedule topic: DELAY dropped and REAL_TOPIC kept, as upstream;
    # every level is 1 s here, so stored in its topic no earlier than a second after birth.
    assert got["body-1"]["properties"] == {"color": "", "size": "", "DELAY": "",
                                           "REAL_TOPIC": "CppFeatures"}
    assert got["body-1"]["stored"] - got["body-1"]["born"] >= 1000
    assert got["big:01"]["body"] == BIG_BODY  # the consumer decompressed it

    by_body = {m.body[:6]: m for m in await stored(cluster, "CppFeatures")}
    assert sorted(by_body) == [b"big:01", b"body-0", b"body-1"]
    props = by_body[b"body-0"].properties
    assert (props["color"], props["size"]) == ("blue", "L")
    delayed = by_body[b"body-1"]
    assert "DELAY" not in delayed.properties
    assert delayed.properties["REAL_TOPIC"] == "CppFeatures"  # it came through the schedule
    assert delayed.store_timestamp - delayed.born_timestamp >= 1000
    big = by_body[b"big:01"]
    assert big.body == BIG_BODY.encode()
    assert big.store_size < len(BIG_BODY) // 4  # the client compressed it; stored so


async def test_send_orderly_to_an_orderly_push_consumer(cluster: Cluster,
                                                        tmp_path: Path) -> None:
    await ready(cluster, "CppOrderly")  # 2 queues on each of 2 brokers
    result = await scenario(cluster, tmp_path, "orderly", "CppOrderly", "ordg", 12)
    assert [s["status"] for s in result["sent"]] == ["OK"] * 12
    got = result["messages"]
    assert sorted(d["body"] for d in got) == sorted(f"body-{i}" for i in range(12))
    for order in range(3):
        delivered = [d for d in got if d["keys"] == f"order-{order}"]
        # Each order's messages come in the order they were sent.
        assert [d["body"] for d in delivered] == [f"body-{i}" for i in range(order, 12, 3)]
    msgs = await stored(cluster, "CppOrderly")
    queues = {}
    for order in range(3):
        mine = [m for m in msgs if m.keys == [f"order-{order}"]]
        places = {(m.broker_name, m.queue_id) for m in mine}
        assert len(places) == 1, (order, places)  # one queue per order
        queues[order] = places.pop()
        assert sorted(mine, key=lambda m: m.queue_offset) == sorted(
            mine, key=lambda m: int(m.body[5:]))  # queue order is send order
    assert len(set(queues.values())) == 3  # three orders, three queues (order % 4)


async def test_broadcasting_push_consumers_each_get_every_message(cluster: Cluster,
                                                                  tmp_path: Path) -> None:
    await ready(cluster, "CppBroadcast")
    result = await scenario(cluster, tmp_path, "broadcast", "CppBroadcast", "bcg", 5)
    assert result["live"], result
    assert [s["status"] for s in result["sent"]] == ["OK"] * 5
    for consumer in result["consumers"]:
        assert sorted(d["body"] for d in consumer) == [f"body-{i}" for i in range(5)]
    # Broadcasting consumers keep their offsets themselves; the brokers hold none.
    for broker in cluster.brokers:
        assert broker.offsets.offsets("bcg", "CppBroadcast") == {}

"""failOnDataLoss both ways: retention on a broker with 64 KiB commit-log segments and no
reserved time moves a queue's minimum past the offset a query's checkpoint holds."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidemq.client.blocking import BlockingProducer, BlockingPullConsumer
from tidemq.errors import TideMQError
from tidemq.spark.stream_start import start_stream
from tidemq.types import Message, MessageQueue

from .conftest import Server, start_standalone

pytestmark = pytest.mark.spark

TOPIC = "Lossy"
EVERY_HOUR = ";".join(f"{h:02d}" for h in range(24))


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_standalone(tmp_path_factory.mktemp("lossy"), "mappedFileSizeCommitLog=65536",
                         "fileReservedTime=0", f"deleteWhen={EVERY_HOUR}",
                         "cleanResourceInterval=200", "messageIndexEnable=false")
    yield s
    s.stop()


def send(server: Server, first: int, count: int) -> None:
    queue = MessageQueue(TOPIC, "broker-a", 0)
    with BlockingProducer("lossy-producer", server.namesrv) as p:
        for start in range(first, first + count, 50):
            p.send_batch([Message(TOPIC, f"{i:05d}".encode() + b"." * 400)
                          for i in range(start, min(first + count, start + 50))], queue=queue)


def bounds(server: Server) -> tuple[int, int]:
    with BlockingPullConsumer("lossy-probe", server.namesrv) as c:
        q = MessageQueue(TOPIC, "broker-a", 0)
        return c.get_min_offset(q), c.get_max_offset(q)


def wait_bounds(server: Server, ok: Callable[[int, int], bool], what: str) -> tuple[int, int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(TideMQError):  # until the new topic's route is registered
            lo, hi = bounds(server)
            if ok(lo, hi):
                return lo, hi
        time.sleep(0.1)  # another process: its answers are all there is to wait on
    raise AssertionError(what)


def query(spark: Any, server: Server, root: Path, fail: str) -> Any:
    return start_stream(spark.readStream.format("tidemq").option("namesrv", server.namesrv)
            .option("topic", TOPIC).option("startingOffsets", "earliest")
            .option("failOnDataLoss", fail).load()
            .selectExpr("queue", "offset").writeStream.format("json")
            .option("path", str(root / "out")).option("checkpointLocation", str(root / "ckpt"))
            .trigger(availableNow=True))


def offsets(spark: Any, root: Path) -> list[int]:
    rows = spark.read.schema("queue int, offset long").json(str(root / "out")).collect()
    return sorted(r.offset for r in rows if r.queue == 0)


def test_fail_on_data_loss_true_fails_false_skips_ahead(spark: Any, lossy: Server,
                                                        tmp_path: Path) -> None:
    from pyspark.errors import StreamingQueryException

    send(lossy, 0, 10)
    wait_bounds(lossy, lambda _lo, hi: hi >= 10, "the first messages never became visible")
    first = query(spark, lossy, tmp_path, "true")
    assert first.awaitTermination(120) and first.exception() is None
    assert offsets(spark, tmp_path) == list(range(10))

    send(lossy, 10, 600)  # ~250 KiB: several segments, and retention drops the old ones
    lo, hi = wait_bounds(lossy, lambda lo, hi: lo > 10 and hi == 610,
                         "retention never removed a segment")

    strict = query(spark, lossy, tmp_path, "true")
    with pytest.raises(StreamingQueryException,
                       match=r"Lossy broker-a:0: offsets 10\.\.\d+ are no longer available"
                       ) as info:
        strict.awaitTermination(120)
    assert "Set failOnDataLoss=false to skip them" in str(info.value)

    assert offsets(spark, tmp_path) == list(range(10))  # nothing written by the failure

    lenient = query(spark, lossy, tmp_path, "false")
    assert lenient.awaitTermination(120) and lenient.exception() is None
    got = offsets(spark, tmp_path)
    skipped_to = got[10]
    assert skipped_to >= lo and got == [*range(10), *range(skipped_to, hi)]


def test_an_executor_finds_its_range_gone(lossy: Server) -> None:
    """Retention between planning and reading: the executor's own check."""
    from tidemq.spark.access import QueueKey
    from tidemq.spark.options import parse_source_options
    from tidemq.spark.plan import DataLossError
    from tidemq.spark.ranges import read_range

    try:
        lo, hi = bounds(lossy)
    except TideMQError:  # the topic does not exist yet: this test runs first or alone
        lo = hi = 0
    if lo == 0:  # nothing removed yet: write past a few segments for retention to drop
        send(lossy, hi, 600)
    lo, hi = wait_bounds(lossy, lambda lo, hi: lo > 0 and hi > lo, "no data was removed")
    q = QueueKey(TOPIC, "broker-a", 0)
    strict = parse_source_options({"namesrv": lossy.namesrv, "topic": TOPIC},
                                  streaming=False)
    with pytest.raises(DataLossError, match=f"offsets 0..{lo - 1} of the range 0..{hi}"):
        list(read_range(strict, q, 0, hi))
    lenient = parse_source_options({"namesrv": lossy.namesrv, "topic": TOPIC,
                                    "failOnDataLoss": "false"}, streaming=False)
    rows = [o for b in read_range(lenient, q, 0, hi) for o in b.column("offset").to_pylist()]
    assert rows == list(range(lo, hi))

"""examples/orders_pipeline.py, briefly, against the standalone server: orders in, window
totals out to Parquet and to the result topic."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tidemq.client.blocking import BlockingProducer
from tidemq.types import Message

from .conftest import Server, wait_visible

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders_pipeline.py"

#: (customer, amount, event time): minutes 12:00 and 12:01 close once the last order
#: (12:05) moves the watermark (one minute behind the newest event) past their end.
ORDERS = [("ada", 10.0, "12:00:05"), ("bob", 4.5, "12:00:20"), ("ada", 2.25, "12:00:59"),
          ("ada", 1.0, "12:01:00"), ("bob", 3.0, "12:01:30"), ("bob", 7.0, "12:05:00")]
CLOSED = {("12:00", "ada"): (2, 12.25), ("12:00", "bob"): (1, 4.5),
          ("12:01", "ada"): (1, 1.0), ("12:01", "bob"): (1, 3.0)}


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("orders_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_orders_pipeline_writes_closed_windows_to_parquet_and_the_topic(
        spark: Any, server: Server, tmp_path: Path) -> None:
    example = load_example()
    with BlockingProducer("orders-test", server.namesrv) as p:
        for i, (customer, amount, at) in enumerate(ORDERS):
            order = {"order_id": i, "customer": customer, "amount": amount,
                     "event_time": f"2024-05-01T{at}Z"}
            p.send(Message("orders", json.dumps(order).encode()))
        p.send(Message("orders", b"not json"))  # dropped, not fatal
    wait_visible(server, "orders", len(ORDERS) + 1)
    out = tmp_path / "out"
    args = example.parse_args(["--namesrv", server.namesrv, "--output", str(out),
                               "--available-now"])
    query = example.start(spark, args)
    assert query.awaitTermination(180)
    assert query.exception() is None
    logged = json.loads((out / "_checkpoint" / "offsets" / "0").read_text().splitlines()[1])
    assert logged["conf"]["spark.sql.shuffle.partitions"] == "4"  # not Spark's 200

    rows = spark.read.parquet(str(out)).collect()
    got = {(r.window_start.strftime("%H:%M"), r.customer): (r.orders, r.amount)
           for r in rows}
    assert got == CLOSED  # the 12:05 window is still open: the watermark has not passed it
    assert len(rows) == len(CLOSED)

    wait_visible(server, "order_totals", len(CLOSED))
    messages = spark.read.format("tidemq").option("namesrv", server.namesrv) \
        .option("topic", "order_totals").load().collect()
    totals = [json.loads(m.body) for m in messages]
    assert {(t["window_start"][11:16], t["customer"]): (t["orders"], t["amount"])
            for t in totals} == CLOSED
    assert len(totals) == len(CLOSED)
    assert all(m.keys == t["customer"] and m.tags == "window"
               for m, t in zip(messages, totals, strict=True))

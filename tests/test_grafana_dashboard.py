"""docs/grafana/tidemq-dashboard.json queries metrics that exist: every series name and
every label it groups by is found in a scrape of a real broker and name server."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from tests.broker.test_metrics import free_port

from tidemq.client import AdminClient, Message, MessageQueue, Producer, PullConsumer
from tidemq.testing import Cluster

DASHBOARD = Path(__file__).parent.parent / "docs" / "grafana" / "tidemq-dashboard.json"
#: Labels Prometheus adds at scrape time, and a histogram's bucket label.
_ADDED = {"instance", "job", "le"}
#: The label set of a family with no series at scrape time: any label passes.
_ANY_LABEL = ("*",)


def _series(port: int) -> dict[str, set[str]]:
    """Each sample name of a scrape, with the label names it carries."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        if not family.samples:  # declared, no series now (nothing dropped, say)
            suffix = "_total" if family.type == "counter" else ""
            out[family.name + suffix] = set(_ANY_LABEL)
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _queries() -> list[tuple[str, str]]:
    """Each panel query with its legend."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [(t["expr"], t["legendFormat"]) for p in dashboard["panels"] for t in p["targets"]]


async def test_every_query_of_the_dashboard_names_an_exported_series(tmp_path: Path) -> None:
    broker_port, namesrv_port = free_port(), free_port()
    async with Cluster(tmp_path, brokers=1, broker={"metrics_port": broker_port},
                       namesrv={"metrics_port": namesrv_port}) as cluster:
        app = cluster.brokers[0]
        async with AdminClient(cluster.namesrv_addr) as admin:
            await admin.create_topic("Dash", read_queue_nums=1, write_queue_nums=1)
        assert app.registrar is not None
        await app.registrar.register_all()
        mq = MessageQueue("Dash", "broker-a", 0)
        async with Producer("dash-producers", cluster.namesrv_addr) as producer:
            await producer.send(Message("Dash", b"x"), queue=mq)
        assert app.store.wait_dispatched()
        async with PullConsumer("dash-group", cluster.namesrv_addr) as consumer:
            consumer.assign([mq])
            await consumer.seek_to_beginning()
            async with asyncio.timeout(10):
                while not await consumer.poll(timeout=1.0):
                    pass
            await consumer.commit({mq: 0})
        exported = {**await asyncio.to_thread(_series, broker_port),
                    **await asyncio.to_thread(_series, namesrv_port)}
    queries = _queries()
    assert len(queries) >= 10
    for expr, legend in queries:
        names = set(re.findall(r"\btidemq_\w+", expr))
        assert names, expr
        missing = names - set(exported)
        assert not missing, f"{expr}: {sorted(missing)} not exported"
        carried = set().union(*(exported[n] for n in names)) | _ADDED
        if "*" in carried:
            continue
        grouped = {label.strip() for group in re.findall(r"\bby \(([^)]*)\)", expr)
                   for label in group.split(",")}
        assert grouped <= carried, f"{expr}: groups by {sorted(grouped - carried)}"
        shown = set(re.findall(r"\{\{(\w+)\}\}", legend))
        assert shown <= carried, f"{legend}: shows {sorted(shown - carried)}"

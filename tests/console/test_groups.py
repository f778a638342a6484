"""The groups page and a topic's page list every group with stored offsets, including
those of Spark queries, which commit offsets without a heartbeat and so have no group
config; resetting such a group warns that the query keeps its own offsets."""

from __future__ import annotations

import asyncio
import html
import re

from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import Message, MessageQueue, Producer
from tidemq.client.blocking import BlockingPullConsumer
from tidemq.testing import Cluster


def _commit_like_spark(namesrv: str, group: str, topic: str, offset: int) -> None:
    """What the Spark source does after a batch (spark/access.py): a blocking pull
    consumer of ``group`` stores offsets and never sends a heartbeat."""
    with BlockingPullConsumer(group, namesrv) as consumer:
        consumer.commit(MessageQueue(topic, "broker-a", 0), offset)


async def test_groups_with_offsets_but_no_config_are_listed(http: Http, cluster: Cluster
                                                             ) -> None:
    await http.post("/topics", {"topic": "Orders", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    async with Producer("orders-producers", cluster.namesrv_addr) as producer:
        for i in range(5):
            await producer.send(Message("Orders", f"o{i}".encode()),
                                queue=MessageQueue("Orders", "broker-a", 0))
    cluster.brokers[0].store.wait_dispatched()
    await asyncio.to_thread(_commit_like_spark, cluster.namesrv_addr, "spark-Orders",
                            "Orders", 3)
    await asyncio.to_thread(_commit_like_spark, cluster.namesrv_addr, "nightly-etl",
                            "Orders", 5)
    assert "spark-Orders" not in cluster.brokers[0].subscription_groups.groups

    groups = await http.get("/groups")
    assert 'data-group="spark-Orders"' in groups.text
    assert 'data-group="nightly-etl"' in groups.text
    topic = await http.get("/topics/Orders")
    assert 'href="/groups/spark-Orders"' in topic.text
    assert 'href="/groups/nightly-etl"' in topic.text

    page = await http.get("/groups/spark-Orders")
    assert 'id="spark-note"' in page.text and 'id="group-lag">2<' in page.text
    for group in ("spark-Orders", "nightly-etl"):
        confirm = await http.post(f"/groups/{group}/reset", {"topic": "Orders",
                                                             "to": "earliest"})
        assert "A Spark query keeps its own offsets in its checkpoint" in html.unescape(
            confirm.text)
    assert cluster.brokers[0].offsets.query("spark-Orders", "Orders", 0) == 3


async def test_a_group_no_broker_knows_is_not_found(http: Http) -> None:
    """Not a page of an empty group that "looks like a Spark query's"."""
    page = await http.get("/groups/NoSuchGroup")
    assert page.status == 404
    assert "no broker knows a consumer group named &#39;NoSuchGroup&#39;" in page.text
    assert 'id="spark-note"' not in page.text


async def test_groups_sort_by_lag_tps_and_consumers_across_pages(http: Http,
                                                                 cluster: Cluster) -> None:
    """Dashboard's sorted group list: the sort is the server's, over every group that
    matches the filter, and the pager and the filter keep it."""
    await http.post("/topics", {"topic": "Ledger", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    async with Producer("ledger-producers", cluster.namesrv_addr) as producer:
        for i in range(10):
            await producer.send(Message("Ledger", f"l{i}".encode()),
                                queue=MessageQueue("Ledger", "broker-a", 0))
    cluster.brokers[0].store.wait_dispatched()
    for group, offset in (("ledger-a", 9), ("ledger-b", 2), ("ledger-c", 5), ("other", 0)):
        await asyncio.to_thread(_commit_like_spark, cluster.namesrv_addr, group, "Ledger",
                                offset)

    by_lag = await http.get("/groups?sort=lag")
    assert _rows(by_lag.text) == ["other", "ledger-b", "ledger-c", "ledger-a"]
    assert 'data-sort="lag"' in by_lag.text
    filtered = await http.get("/groups?sort=lag&q=ledger")
    assert _rows(filtered.text) == ["ledger-b", "ledger-c", "ledger-a"]
    assert 'name="sort" value="lag"' in filtered.text, "the filter form drops the sort"
    by_name = await http.get("/groups?sort=nonsense")
    assert _rows(by_name.text) == ["ledger-a", "ledger-b", "ledger-c", "other"]
    for sort in ("tps", "consumers"):  # all equal here: ties go by name
        assert _rows((await http.get(f"/groups?sort={sort}")).text) == [
            "ledger-a", "ledger-b", "ledger-c", "other"]


def _rows(text: str) -> list[str]:
    return re.findall(r'<tr data-group="([^"]+)"', text)

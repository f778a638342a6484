"""Who is connected, with client versions by name: a topic's online consumers and the
producers of a producer group, and a group's consumers."""

from __future__ import annotations

import html
import re

from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import Message, MessageQueue, Producer, PullConsumer
from tidemq.testing import Cluster


def table(text: str, table_id: str) -> str:
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', text, re.S)
    assert found, f"no table {table_id}"
    return html.unescape(found.group(1))


async def test_a_topics_consumers_and_producers_with_their_versions(http: Http,
                                                                   cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Linked", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    async with Producer("linked-producers", cluster.namesrv_addr) as producer, \
            PullConsumer("linked-group", cluster.namesrv_addr) as consumer:
        await producer.send(Message("Linked", b"x"), queue=MessageQueue("Linked", "broker-a", 0))
        await producer.instance.send_heartbeat()
        consumer.subscribe("Linked")
        await consumer.instance.routes.get("Linked", refresh=True)
        await consumer.instance.send_heartbeat()

        page = await http.get("/topics/Linked?producer_group=linked-producers")
        consumers = table(page.text, "topic-consumers")
        assert "linked-group" in consumers and consumer.instance.client_id in consumers
        assert "V5_3_3" in consumers
        producers = table(page.text, "topic-producers")
        assert producer.instance.client_id in producers and "V5_3_3" in producers

        nobody = await http.get("/topics/Linked?producer_group=no-such-producers")
        assert 'id="no-producers"' in nobody.text
        group = await http.get("/groups/linked-group")
        assert "V5_3_3" in table(group.text, "consumers")

"""An online consumer's own account of itself (GET_CONSUMER_RUNNING_INFO through its
broker), linked from its group's page, against a real in-process cluster."""

from __future__ import annotations

import asyncio
import html
import re

from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import ConsumeStatus, MessageExt, PushConsumer
from tidemq.testing import Cluster


async def test_a_consumer_reports_its_queues_and_subscriptions(http: Http, cluster: Cluster
                                                               ) -> None:
    await http.post("/topics", {"topic": "Told", "read_queues": "2", "write_queues": "2"})
    await registered(cluster)

    async def ok(_msgs: list[MessageExt]) -> ConsumeStatus:
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("tellers", cluster.namesrv_addr, listener=ok)
    consumer.subscribe("Told", "TagA || TagB")
    await consumer.start()
    try:
        link = None
        for _ in range(100):  # the heartbeat and the first rebalance come shortly
            group = await http.get("/groups/tellers")
            found = re.search(r'href="(/groups/tellers/clients/[^"]+)"', group.text)
            if found:
                page = await http.get(html.unescape(found.group(1)))
                if len(re.findall(r"<tr><td>Told</td><td>broker-a</td>", page.text)) == 2:
                    link = found.group(1)
                    break
            await asyncio.sleep(0.1)
        assert link is not None, "no link to the consumer, or it holds no queue of Told"
        page = await http.get(html.unescape(link))
        assert page.status == 200
        assert re.search(r"<dt>messageModel</dt><dd>CLUSTERING</dd>", page.text)
        sub = re.search(r'<tr data-topic="Told">(.*?)</tr>', page.text)
        assert sub and "TagA || TagB" in html.unescape(sub.group(1))
    finally:
        await consumer.close()
    gone = await http.get(html.unescape(link))
    assert gone.status == 502 and 'id="error"' in gone.text

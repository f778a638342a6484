"""A group's dead letters, as Dashboard's DLQ page shows them: counted on the group's
page, listed by time, and each resent to a consumer of the group it came from."""

from __future__ import annotations

import html
import re

from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import Message, MessageQueue, Producer, PullConsumer
from tidemq.client.retry_sender import RetrySender
from tidemq.testing import Cluster


async def test_a_dead_letter_is_counted_listed_and_offered_back_to_its_group(
        http: Http, cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Pay", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    mq = MessageQueue("Pay", "broker-a", 0)
    async with Producer("pay-producers", cluster.namesrv_addr) as producer:
        await producer.send(Message("Pay", b"cannot be paid", {"KEYS": "bill-1"}), queue=mq)
    cluster.brokers[0].store.wait_dispatched()
    async with PullConsumer("payers", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Pay")
        await consumer.instance.routes.get("Pay", refresh=True)
        await consumer.instance.send_heartbeat()
        await consumer.commit({mq: 0})  # read from the first message
        before = await http.get("/groups/payers")
        assert re.search(r'id="dead-letters">0<', before.text)
        polled = await consumer.poll(timeout=10)
        assert [m.body for m in polled] == [b"cannot be paid"]
        assert await RetrySender("payers", consumer.instance,
                                 max_reconsume_times=16).send_back(polled[0], -1)
        cluster.brokers[0].store.wait_dispatched()
        await registered(cluster)

        page = await http.get("/groups/payers")
        dead = re.search(r'id="dead-letters"><a href="([^"]+)">1<', page.text)
        assert dead, page.text[-4000:]
        listed = await http.get(html.unescape(dead.group(1)))
        assert listed.status == 200 and "1 message stored" in listed.text
        link = re.search(r'<td><a href="(/messages\?[^"]+)"', listed.text)
        assert link
        found = await http.get(html.unescape(link.group(1)))
        assert "cannot be paid" in found.text
        offered = re.search(r'<select name="target">(.*?)</select>', found.text, re.S)
        assert offered and 'value="payers ' in offered.group(1), \
            "the dead letter is not offered back to its group's consumer"

"""A topic's messages by store time, paged, with each consuming group's status."""

from __future__ import annotations

import asyncio
import datetime
import html
import re
import time
import urllib.parse

from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import AdminClient, Message, MessageQueue, Producer, PullConsumer
from tidemq.testing import Cluster


def local(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000).isoformat(timespec="milliseconds")


async def test_messages_by_time_are_paged_with_their_consumption(http: Http,
                                                                 cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Timed", "read_queues": "2", "write_queues": "2"})
    await registered(cluster)
    q0, q1 = MessageQueue("Timed", "broker-a", 0), MessageQueue("Timed", "broker-a", 1)
    async with Producer("timed-producers", cluster.namesrv_addr) as producer:
        for i in range(5):
            await producer.send(Message("Timed", f"early{i}".encode()), queue=q0)
        cluster.brokers[0].store.wait_dispatched()
        async with AdminClient(cluster.namesrv_addr) as admin:
            last_early = (await admin.message_at(q0, 4)).store_timestamp
        while time.time() * 1000 <= last_early + 1:  # later messages get a later time
            await asyncio.sleep(0.005)
        for i in range(25):
            await producer.send(Message("Timed", f"late{i}".encode(), {"KEYS": f"k{i}"}),
                                queue=q0 if i < 15 else q1)
    cluster.brokers[0].store.wait_dispatched()
    async with PullConsumer("timed-group", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Timed")
        await consumer.instance.routes.get("Timed", refresh=True)
        await consumer.instance.send_heartbeat()
        await consumer.commit({q0: 15})

    # datetime-local has whole seconds at most in most browsers; the page takes ms too.
    begin = urllib.parse.quote(local(last_early + 1))
    end = urllib.parse.quote(local(int(time.time() * 1000) + 1000))
    first = await http.get(f"/topics/Timed/messages?begin={begin}&end={end}")
    assert first.status == 200, first.text[-500:]
    assert re.search(r'id="range-total">25 messages', first.text)
    second = await http.get(f"/topics/Timed/messages?begin={begin}&end={end}&page=2")
    rows = [re.findall(r"<tr><td><a href=\"/messages\?by=offset[^\"]*\">", p.text)
            for p in (first, second)]
    assert [len(r) for r in rows] == [20, 5]
    text = html.unescape(first.text + second.text)
    assert "<th>timed-group</th>" in text
    offsets = [(q, int(o)) for q, o in re.findall(
        r'<td>broker-a / (\d)</td><td class="num">(\d+)</td>', text)]
    assert offsets == [("0", o) for o in range(5, 20)] + [("1", o) for o in range(10)]
    # q0 offsets 5..19 are in range and the group committed 15: 5..14 consumed.
    assert text.count('class="consumed"') == 10 and text.count('class="pending"') == 15
    assert 'id="next-page"' in first.text and 'id="prev-page"' in second.text

    everything = await http.get("/topics/Timed/messages?begin=&end=" + end)  # the last hour
    assert re.search(r'id="range-total">30 messages', everything.text)
    bad = await http.get(f"/topics/Timed/messages?begin={end}&end={begin}")
    assert bad.status == 400 and "begin time before the end time" in bad.text


async def test_a_messages_page_says_which_groups_consumed_it(http: Http,
                                                             cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Seen", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    mq = MessageQueue("Seen", "broker-a", 0)
    async with Producer("seen-producers", cluster.namesrv_addr) as producer:
        for i in range(4):
            await producer.send(Message("Seen", f"m{i}".encode()), queue=mq)
    cluster.brokers[0].store.wait_dispatched()
    for group, upto in (("seen-fast", 4), ("seen-slow", 2)):
        async with PullConsumer(group, cluster.namesrv_addr) as consumer:
            consumer.subscribe("Seen")
            await consumer.instance.routes.get("Seen", refresh=True)
            await consumer.instance.send_heartbeat()
            await consumer.commit({mq: upto})

    async def status(offset: int) -> dict[str, str]:
        page = await http.get(f"/messages?by=offset&topic=Seen&broker=broker-a&queue_id=0"
                              f"&offset={offset}")
        return dict(re.findall(r'data-group="([^"]+)">[^:]+: ([a-z ]+)<', page.text))

    assert await status(1) == {"seen-fast": "consumed", "seen-slow": "consumed"}
    assert await status(3) == {"seen-fast": "consumed", "seen-slow": "not consumed"}

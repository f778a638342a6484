"""The dead-letter pages over HTTP against an in-process cluster: every DLQ with its
count, one DLQ's messages newest first and paged, a page exported as CSV and JSON, and
a selection and the whole DLQ resent to an online consumer of the group, after a
confirmation, in the background, with what the consumer did not take named."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import csv
import html
import io
import json
import re
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st
from tests.console.conftest import Http
from tests.console.test_app import registered

from tidemq.client import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from tidemq.client.dlq_admin import DeadLetter
from tidemq.client.retry_sender import RetrySender
from tidemq.console.dlq import export_row
from tidemq.testing import Cluster

#: Dead letters the tests make: more than a page.
LETTERS = 23


async def bury(cluster: Cluster, http: Http, group: str, count: int) -> None:
    """``count`` messages of topic Pay (bodies ``bill-0`` ...) sent to ``group``'s DLQ
    by a consumer that gave up on them, oldest first."""
    await http.post("/topics", {"topic": "Pay", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    mq = MessageQueue("Pay", "broker-a", 0)
    async with Producer("pay-producers", cluster.namesrv_addr) as producer:
        for i in range(count):
            await producer.send(Message("Pay", f"bill-{i}".encode(), {"KEYS": f"k{i}"}),
                                queue=mq)
    cluster.brokers[0].store.wait_dispatched()
    await give_up(cluster.namesrv_addr, group, mq, count)
    cluster.brokers[0].store.wait_dispatched()
    await registered(cluster)


async def give_up(namesrv: str, group: str, mq: MessageQueue, count: int) -> None:
    """A consumer of ``group`` polls the first ``count`` messages of ``mq`` and sends
    each to the group's DLQ (send-back with delay level -1), oldest first."""
    async with PullConsumer(group, namesrv) as consumer:
        consumer.subscribe(mq.topic)
        await consumer.instance.routes.get(mq.topic, refresh=True)
        await consumer.commit({mq: 0})
        sender = RetrySender(group, consumer.instance, max_reconsume_times=16)
        polled: list[MessageExt] = []
        while len(polled) < count:
            polled.extend(await consumer.poll(timeout=10))
        for msg in polled:
            assert await sender.send_back(msg, -1)


class Listener:
    """A push consumer's listener that records bodies and will not take ``refuse``."""

    def __init__(self, refuse: bytes = b"") -> None:
        self.bodies: list[bytes] = []
        self.refuse = refuse

    async def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        self.bodies.extend(m.body for m in msgs)
        if any(m.body == self.refuse for m in msgs):
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS


@contextlib.asynccontextmanager
async def online(cluster: Cluster) -> AsyncIterator[tuple[PushConsumer, Listener]]:
    """A push consumer of the group ``payers`` online (subscribed to a topic of its own,
    so that only resends reach its listener)."""
    listener = Listener(refuse=b"bill-5")
    consumer = PushConsumer("payers", cluster.namesrv_addr, listener=listener,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    consumer.subscribe("PayersOwn")
    await consumer.start()
    try:
        yield consumer, listener
    finally:
        await consumer.close()


def _msg_rows(text: str) -> list[str]:
    return re.findall(r'<tr data-msg="([^"]+)">', text)


async def _finished(http: Http, job_url: str) -> dict[str, object]:
    api = "/api" + job_url
    for _ in range(200):
        job = json.loads((await http.get(api)).text)
        if job["finished"]:
            return dict(job)
        await asyncio.sleep(0.05)  # polling an HTTP endpoint: it has no event to wait on
    raise AssertionError(f"the resend did not finish: {job}")


async def test_dead_letters_are_listed_paged_newest_first_and_exported(
        http: Http, cluster: Cluster) -> None:
    await bury(cluster, http, "payers", LETTERS)
    listing = await http.get("/dlq")
    assert re.search(r'<tr data-group="payers">.*?dlq-messages">23<', listing.text, re.S)
    assert 'href="/dlq/payers"' in (await http.get("/groups/payers")).text

    first = await http.get("/dlq/payers")
    assert f"{LETTERS} messages stored in %DLQ%payers, newest first" in first.text
    assert len(_msg_rows(first.text)) == 20
    previews = re.findall(r'<td class="preview"[^>]*>([^<]+)</td>', first.text)
    assert previews[:3] == ["bill-22", "bill-21", "bill-20"]
    assert 'href="/topics/Pay">Pay</a>' in first.text
    second = await http.get("/dlq/payers?page=2")
    assert re.findall(r'<td class="preview"[^>]*>([^<]+)</td>', second.text) == [
        "bill-2", "bill-1", "bill-0"]

    as_csv = await http.get("/dlq/payers/export?format=csv&page=2")
    rows = list(csv.DictReader(io.StringIO(as_csv.text, newline="")))
    assert [r["body"] for r in rows] == ["bill-2", "bill-1", "bill-0"]
    assert {r["topic"] for r in rows} == {"Pay"} and rows[0]["keys"] == "k2"
    assert rows[0]["msgId"] == _msg_rows(second.text)[0]
    as_json = json.loads((await http.get("/dlq/payers/export?format=json")).text)
    assert len(as_json) == 20 and as_json[0]["body"] == "bill-22"
    assert as_json[0]["reconsumeTimes"] == 1 and as_json[0]["bodyEncoding"] == "utf-8"
    assert (await http.get("/dlq/payers/export?format=xml")).status == 400


async def test_a_selection_and_the_whole_dlq_are_resent_after_a_confirmation(
        http: Http, cluster: Cluster) -> None:
    await bury(cluster, http, "payers", LETTERS)
    async with online(cluster) as (consumer, listener):
        await _resend(http, consumer, listener)


async def _resend(http: Http, consumer: PushConsumer, listener: Listener) -> None:
    page = await http.get("/dlq/payers?page=2")
    picked = _msg_rows(page.text)[:2]
    client = consumer.instance.client_id
    assert f'<option value="{client}">' in page.text

    confirm = await http.post("/dlq/payers/resend", [
        ("which", "selected"), ("target", client), *(("msg", m) for m in picked)])
    assert "Resend 2 selected messages of payers" in html.unescape(confirm.text)
    assert listener.bodies == [], "resent before the confirmation"
    one = await http.post("/dlq/payers/resend", {"one": picked[0], "target": client})
    assert "Resend 1 selected message of payers" in html.unescape(one.text)
    assert f'name="msgs" value="{picked[0]}"' in one.text
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"',
                             confirm.text))
    started = await http.post("/dlq/payers/resend", {**{k: html.unescape(v) for k, v in
                                                        fields.items() if k != "csrf_token"}})
    job_url = re.sub(r"^https?://[^/]+", "", started.url)
    assert re.fullmatch(r"/dlq/payers/resends/[\w-]+", job_url), started.url
    job = await _finished(http, job_url)
    assert job["resent"] == 2 and job["failed"] == []
    assert sorted(listener.bodies) == [b"bill-1", b"bill-2"]

    everything = await http.post("/dlq/payers/resend", {"which": "all", "target": client,
                                                         "confirm": "yes"})
    job = await _finished(http, re.sub(r"^https?://[^/]+", "", everything.url))
    assert job["total"] == LETTERS and job["resent"] == LETTERS - 1
    failed = job["failed"]
    assert isinstance(failed, list) and len(failed) == 1
    assert failed[0]["why"].startswith("CR_LATER")
    progress = await http.get(re.sub(r"^https?://[^/]+", "", everything.url))
    assert "23 of 23 tried: 22 consumed, 1 failed" in progress.text
    assert failed[0]["msgId"] in progress.text
    assert sorted(set(listener.bodies)) == sorted(f"bill-{i}".encode()
                                                  for i in range(LETTERS))


async def test_a_resend_needs_a_consumer_and_a_selection(http: Http, cluster: Cluster) -> None:
    await bury(cluster, http, "payers", 1)
    page = await http.get("/dlq/payers")
    assert 'id="no-consumer"' in page.text
    refused = await http.post("/dlq/payers/resend", {"which": "all", "target": ""})
    assert refused.status == 400
    refused = await http.post("/dlq/payers/resend", {"which": "selected", "target": "c"})
    assert refused.status == 400 and "select the messages" in refused.text
    unknown = await http.get("/dlq/payers/resends/nope")
    assert unknown.status == 404


@given(st.binary(max_size=64), st.lists(st.text("ab c", min_size=1, max_size=3), max_size=3))
def test_an_exported_body_reads_back_as_its_bytes(body: bytes, keys: list[str]) -> None:
    letter = DeadLetter(msg_id="0A0000010000000000000001", uniq_key=None, topic="T",
                        reconsume_times=3, store_timestamp=1_700_000_000_000,
                        broker_name="broker-a", queue_id=0, queue_offset=7, tags=None,
                        keys=tuple(keys), body=body)
    row = export_row(letter)
    back = (row["body"].encode("utf-8") if row["bodyEncoding"] == "utf-8"
            else base64.b64decode(row["body"]))
    assert back == body
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, list(row))
    writer.writeheader()
    writer.writerow(row)
    read = csv.DictReader(io.StringIO(out.getvalue(), newline=""))
    assert next(read)["body"] == row["body"]

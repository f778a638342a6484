"""A consumer group created, changed and deleted from the console (as Dashboard's group
page does), its consumers' subscriptions shown, against a real in-process cluster."""

from __future__ import annotations

import html
import re

from tests.console.conftest import Http
from tests.console.test_app import flash, registered

from tidemq.client import Message, MessageQueue, Producer, PullConsumer
from tidemq.console.group_config import NEW_GROUP, group_form
from tidemq.testing import Cluster

FORM = {k: ("true" if v is True else "false" if v is False else str(v))
        for k, v in NEW_GROUP.items()}


def groups(cluster: Cluster) -> dict[str, dict[str, object]]:
    return cluster.brokers[0].subscription_groups.groups


async def test_a_group_is_created_then_changed_keeping_what_the_form_does_not_show(
        http: Http, cluster: Cluster) -> None:
    made = await http.post("/groups", {**FORM, "group": "odd%name|x", "retryMaxTimes": "3",
                                       "consumeEnable": "false"})
    assert made.status == 200 and "Group odd%name|x created on 1 broker(s)" in flash(made.text)
    held = groups(cluster)["odd%name|x"]
    assert (held["retryMaxTimes"], held["consumeEnable"]) == (3, False)
    assert re.search(r'name="retryMaxTimes"[^>]*value="3"', made.text), "the form shows it"
    held["groupSysFlag"] = 7  # a member the form does not edit
    changed = await http.post("/groups", {**FORM, "group": "odd%name|x",
                                          "retryMaxTimes": "5", "consumeEnable": "true"})
    assert "Group odd%name|x updated" in flash(changed.text)
    held = groups(cluster)["odd%name|x"]
    assert (held["retryMaxTimes"], held["consumeEnable"], held["groupSysFlag"]) == (5, True, 7)
    listed = await http.get("/groups?q=ODD%25")
    assert 'data-group="odd%name|x"' in html.unescape(listed.text)


async def test_a_bad_group_form_is_refused_saying_why(http: Http, cluster: Cluster) -> None:
    for form, why in (({"group": "has space"}, "a group name is"),
                      ({"group": "g", "retryQueueNums": "x"}, "Retry queues must be a whole"),
                      ({"group": "g", "retryMaxTimes": "-2"}, "at least -1")):
        page = await http.post("/groups", {**FORM, **form})
        assert page.status == 400 and why in html.unescape(page.text), form
    assert "g" not in groups(cluster)
    read = group_form({**FORM, "group": "g"}, {"groupName": "g", "attributes": {"a": "1"}})
    assert read.error is None and read.config["attributes"] == {"a": "1"}


async def test_a_group_is_deleted_after_a_confirmation(http: Http, cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Kept", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    await http.post("/groups", {**FORM, "group": "gone"})
    mq = MessageQueue("Kept", "broker-a", 0)
    async with PullConsumer("gone", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Kept")
        await consumer.instance.routes.get("Kept", refresh=True)
        await consumer.commit({mq: 0})
    asked = await http.post("/groups/gone/delete", {"clean_offset": "true"})
    assert 'id="confirm-form"' in asked.text and "Its stored offsets go too" in asked.text
    assert "gone" in groups(cluster)
    done = await http.post("/groups/gone/delete", {"clean_offset": "true", "confirm": "yes"})
    assert "Group gone deleted from 1 broker(s) with its offsets." in flash(done.text)
    assert "gone" not in groups(cluster)
    assert cluster.brokers[0].offsets.query("gone", "Kept", 0) is None
    assert 'data-group="gone"' not in done.text


async def test_a_group_page_shows_its_subscriptions_and_resets_a_real_topic_first(
        http: Http, cluster: Cluster) -> None:
    await http.post("/topics", {"topic": "Subbed", "read_queues": "1", "write_queues": "1"})
    await registered(cluster)
    mq = MessageQueue("Subbed", "broker-a", 0)
    async with Producer("sub-producers", cluster.namesrv_addr) as producer:
        await producer.send(Message("Subbed", b"m"), queue=mq)
    async with PullConsumer("subbers", cluster.namesrv_addr) as consumer:
        consumer.subscribe("Subbed", "TagA || TagB")
        await consumer.instance.routes.get("Subbed", refresh=True)
        await consumer.instance.send_heartbeat()
        await consumer.commit({mq: 1, MessageQueue("%RETRY%subbers", "broker-a", 0): 0})
        page = (await http.get("/groups/subbers")).text
    row = re.search(r'<tr data-topic="Subbed">(.*?)</tr>', page)
    assert row and "TagA || TagB" in html.unescape(row.group(1)), page[-3000:]
    assert 'id="consume-mode"' in page
    options = re.search(r'id="reset-form".*?<select name="topic">(.*?)</select>', page, re.S)
    assert options and re.findall(r"<option>([^<]*)</option>", options.group(1)) == [
        "Subbed", "%RETRY%subbers"]
    assert 'id="group-config"' in page
    listed = re.search(r'<tr data-group="subbers">(.*?)</tr>', (await http.get("/groups")).text,
                       re.S)
    assert listed and "<td>Subbed</td>" in listed.group(1), "its retry topic is not listed"

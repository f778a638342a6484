"""Subscriptions and pull-response handling (pure)."""

from __future__ import annotations

import pytest

from tidemq.client.pull import pull_request, read_pull_response
from tidemq.client.subscription import Subscription
from tidemq.codec.command import RemotingCommand
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.errors import BrokerResponseError
from tidemq.formats.hashing import java_string_hash
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import encode_record, pack_host
from tidemq.types import MessageQueue, PullStatus

MQ = MessageQueue("T", "broker-a", 1)


def _record(offset: int, tags: str | None) -> bytes:
    props = {"TAGS": tags} if tags else {}
    return bytes(encode_record(topic=b"T", queue_id=9, body=f"m{offset}".encode(),
                               properties=encode_properties(props), queue_offset=offset,
                               physical_offset=offset * 100,
                               store_host=pack_host("127.0.0.1:10911")))


def _ext(next_offset: int) -> dict[str, str]:
    return {"nextBeginOffset": str(next_offset), "minOffset": "0", "maxOffset": "9",
            "suggestWhichBrokerId": "0"}


def test_subscription_parse() -> None:
    assert Subscription.parse("T").matches_all
    assert Subscription.parse("T", "").matches_all
    assert Subscription.parse("T", " * ").matches_all
    sub = Subscription.parse("T", "a || b ||", version=5)
    assert sub.tags == {"a", "b"}
    assert sub.matches("a") and not sub.matches("c") and not sub.matches(None)
    data = sub.to_data()
    assert data.tags_set == ["a", "b"]
    assert data.code_set == [java_string_hash("a"), java_string_hash("b")]
    assert data.sub_version == 5 and data.sub_string == "a || b ||"


def test_pull_request_flags() -> None:
    sub = Subscription.parse("T", "a")
    held = PullMessageRequestHeader.from_ext(
        pull_request("G", MQ, 7, max_nums=16, subscription=sub, suspend_ms=1500).ext_fields)
    assert (held.sys_flag, held.suspend_timeout_millis, held.subscription) == (6, 1500, "a")
    assert (held.queue_offset, held.max_msg_nums, held.queue_id) == (7, 16, 1)
    quick = PullMessageRequestHeader.from_ext(
        pull_request("G", MQ, 7, max_nums=1, subscription=sub).ext_fields)
    assert quick.sys_flag == 4


def test_found_filters_by_tag_and_decorates() -> None:
    body = _record(3, "a") + _record(4, "b") + _record(5, None)
    response = RemotingCommand(code=0, ext_fields=_ext(6), body=body)
    result = read_pull_response(response, MQ, Subscription.parse("T", "a"), address="b")
    status, next_offset, lo, hi, messages = result
    assert (status, next_offset, lo, hi) == (PullStatus.FOUND, 6, 0, 9)
    assert [m.body for m in messages] == [b"m3"]
    msg = messages[0]
    assert (msg.queue_id, msg.broker_name, msg.queue_offset) == (1, "broker-a", 3)
    assert (msg.properties["MIN_OFFSET"], msg.properties["MAX_OFFSET"]) == ("0", "9")
    everything = read_pull_response(response, MQ, Subscription.parse("T"), address="b")
    assert len(everything.messages) == 3


@pytest.mark.parametrize(("code", "status"), [
    (19, PullStatus.NO_NEW_MSG), (20, PullStatus.NO_MATCHED_MSG),
    (21, PullStatus.OFFSET_ILLEGAL),
])
def test_not_found_statuses(code: int, status: PullStatus) -> None:
    result = read_pull_response(RemotingCommand(code=code, ext_fields=_ext(4)), MQ,
                                Subscription.parse("T"), address="b")
    assert (result.status, result.next_offset, result.messages) == (status, 4, [])


def test_other_codes_raise() -> None:
    with pytest.raises(BrokerResponseError) as info:
        read_pull_response(RemotingCommand(code=24, remark="no sub"), MQ,
                           Subscription.parse("T"), address="b:1")
    assert info.value.code == 24 and info.value.address == "b:1"

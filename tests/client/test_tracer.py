"""The tracer's records of an alike batch made as one text (``RecordRun``): the trace
messages they fill are those the same records make one by one -- the same bodies, the
same ``KEYS``, cut at the same records."""

from __future__ import annotations

import dataclasses
import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.sending import BatchCompression, prepare_send_batch
from tidemq.client.stamps import new_uniq_keys
from tidemq.client.tracer import (
    EncodedRecords,
    RecordRun,
    _MessageBuilder,
    alike_pub_records,
    pub_records,
)
from tidemq.codec.trace import PubRecord, decode_trace_data
from tidemq.types import Message, MessageQueue, SendResult, SendStatus

TRACE = "RMQ_SYS_TRACE_TOPIC"


def _batch(n: int, props: dict[str, str], status: SendStatus, at: int
           ) -> tuple[list[Message], object, SendResult]:
    msgs = [Message("Batched", b"x" * 128, dict(props)) for _ in range(n)]
    prepared = prepare_send_batch(msgs, max_size=1 << 22, keys=new_uniq_keys("127.0.0.1"),
                                  now_ms=1, compression=BatchCompression(None))
    offsets = ",".join(f"7F00000100002A9F{at + i * 200:016X}" for i in range(n))
    result = SendResult(status, ",".join(prepared.keys), offsets,
                        MessageQueue("Batched", "broker-a", 0), 0, message_count=n)
    return msgs, prepared, result


def _messages(events: list[EncodedRecords | RecordRun]) -> list[tuple[bytes, str, int]]:
    builder = _MessageBuilder(TRACE)
    for event in events:
        builder.extend(event)
    builder.close()
    return [(m.body, m.properties["KEYS"], n) for m, n in builder.take(len(builder.messages))]


@settings(deadline=None, max_examples=60)
@given(st.lists(st.integers(2, 1500), min_size=1, max_size=6),
       st.sampled_from([{}, {"TAGS": "tag"}, {"KEYS": "order-1 order-2"},
                        {"TAGS": "标签", "KEYS": "键"}]),
       st.booleans(), st.booleans())
def test_a_run_fills_the_messages_its_records_fill_one_by_one(
        sizes: list[int], props: dict[str, str], ok: bool, lone_first: bool) -> None:
    status = SendStatus.SEND_OK if ok else SendStatus.FLUSH_DISK_TIMEOUT
    runs: list[EncodedRecords | RecordRun] = []
    columns: list[EncodedRecords | RecordRun] = []
    if lone_first:  # a single send's record before: the runs continue its message
        msgs, prepared, result = _batch(1, props, status, 0)
        one = pub_records("pg", msgs, (prepared.keys[0],), result, 5, 1)  # type: ignore[attr-defined]
        runs.append(one)
        columns.append(one)
    for i, n in enumerate(sizes):
        msgs, prepared, result = _batch(n, props, status, i << 32)
        run = pub_records("pg", msgs, prepared, result, 5, 1)  # type: ignore[arg-type]
        assert isinstance(run, RecordRun)
        runs.append(run)
        columns.append(pub_records("pg", msgs, list(prepared.keys), result, 5, 1))  # type: ignore[attr-defined]
    by_run, by_column = _messages(runs), _messages(columns)
    assert by_run == by_column
    assert sum(n for _, _, n in by_run) == sum(sizes) + lone_first
    assert all(len(body) <= 128_000 and len(keys) <= 24_000 for body, keys, _ in by_run)
    records = [r for body, _, _ in by_run for r in decode_trace_data(body).records]
    assert all(isinstance(r, PubRecord) and r.success == ok and r.body_length == 128
               and r.keys == props.get("KEYS", "") for r in records)


def test_ids_of_several_widths_are_made_one_by_one() -> None:
    """Offset ids that differ in width (or in number from the messages): no run, the
    records of the columns."""
    msgs, prepared, result = _batch(3, {}, SendStatus.SEND_OK, 0)
    for offsets in ("7F00000100002A9F0000000000000000,AB,7F00000100002A9F0000000000000002",
                    "7F00000100002A9F0000000000000000"):
        odd = dataclasses.replace(result, offset_msg_id=offsets)
        made = pub_records("pg", msgs, prepared, odd, 5, 1)  # type: ignore[arg-type]
        assert isinstance(made, EncodedRecords)
        assert made.texts == pub_records("pg", msgs, list(prepared.keys), odd, 5, 1).texts  # type: ignore[attr-defined,union-attr]


def test_an_inner_batch_is_run_by_its_messages_keys() -> None:
    """A BatchCQ send's result names the batch's own key: the records are still each
    message's."""
    msgs, prepared, result = _batch(4, {}, SendStatus.SEND_OK, 0)
    inner = dataclasses.replace(result, msg_id="BATCHKEY")
    run = pub_records("pg", msgs, prepared, inner, 5, 1)  # type: ignore[arg-type]
    assert isinstance(run, RecordRun)
    assert _messages([run]) == _messages([pub_records("pg", msgs, list(prepared.keys),  # type: ignore[attr-defined]
                                                      inner, 5, 1)])


@settings(deadline=None, max_examples=40)
@given(st.integers(2, 900), st.sampled_from([{}, {"TAGS": "tag", "KEYS": "order-1"}]),
       st.booleans(), st.booleans())
def test_an_alike_batch_traced_by_its_facts_fills_the_messages_of_its_records(
        n: int, props: dict[str, str], inner: bool, odd_widths: bool) -> None:
    """The records made of an alike batch's first message, ids and result alone are
    those of its messages one by one: run or columns, outer or inner batch."""
    msgs, prepared, result = _batch(n, props, SendStatus.SEND_OK, 0)
    keys = list(prepared.keys)  # type: ignore[attr-defined]
    if odd_widths:  # no run: the records made one by one
        result = dataclasses.replace(result, offset_msg_id=result.offset_msg_id + "F")
    answered = dataclasses.replace(result, msg_id="BATCHKEY") if inner else result
    by_facts = alike_pub_records("pg", msgs[0], ",".join(keys), answered, 5, 1, n)
    assert isinstance(by_facts, EncodedRecords if odd_widths else RecordRun)
    assert _messages([by_facts]) == _messages([pub_records("pg", msgs, keys, answered, 5, 1)])


def test_a_traced_alike_batch_is_not_kept_until_its_records_are_made() -> None:
    """The event of an alike batch holds its first message, ids and result, not the
    batch's messages or encoded entries; its records are those of the messages."""
    from tidemq.client.producer import Producer
    from tidemq.client.tracer import Tracer

    async def unused(_msgs: object) -> SendResult:
        raise AssertionError("not sent")

    msgs, prepared, result = _batch(50, {"TAGS": "t"}, SendStatus.SEND_OK, 0)
    tracer = Tracer(unused, topic=TRACE)
    Producer("pg")._trace_batch(tracer, prepared, msgs[0], msgs, result, 5)  # type: ignore[arg-type]
    [(event, held)] = tracer._queue
    referred = gc.get_referents(*gc.get_referents(event))
    assert prepared not in referred and msgs not in referred
    assert tracer.held_bytes == held < len(prepared.encoded.entries)  # type: ignore[attr-defined]
    assert callable(event)
    made = event()
    assert isinstance(made, RecordRun)
    [(body, keys, count)] = _messages([made])
    records = decode_trace_data(body).records
    assert all(isinstance(r, PubRecord) and r.cost_ms >= 0 for r in records)
    cost = records[0].cost_ms  # type: ignore[union-attr]
    ids = list(prepared.keys)  # type: ignore[attr-defined]
    assert [(body, keys, count)] == _messages([pub_records("pg", msgs, ids, result, 5, cost)])

"""Trace records (RocketMQ's TraceDataEncoder layout): golden bytes, round trips, and
what a damaged or foreign body decodes to."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec.trace import (
    EndTransactionRecord,
    MessageType,
    PubRecord,
    SubAfterRecord,
    SubBeforeRecord,
    TraceRecord,
    decode_trace_data,
    encode_trace_data,
    trace_keys,
)

C, F = "\x01", "\x02"

PUB = PubRecord(1700000000123, "DefaultRegion", "PG", "TopicTest", "7F000001ABCD", "TagA",
                "K1 K2", "127.0.0.1:10911", 11, 5, MessageType.NORMAL,
                "7F00000100002A9F0000000000000000", True)


def _java(*fields: object) -> str:
    """A record as the Java client's StringBuilder appends it."""
    return C.join(str(f) for f in fields) + F


def test_pub_matches_the_java_layout() -> None:
    expected = _java("Pub", 1700000000123, "DefaultRegion", "PG", "TopicTest",
                     "7F000001ABCD", "TagA", "K1 K2", "127.0.0.1:10911", 11, 5, 0,
                     "7F00000100002A9F0000000000000000", "true")
    assert encode_trace_data([PUB]) == expected.encode()


def test_sub_before_after_and_end_transaction_match_the_java_layout() -> None:
    before = SubBeforeRecord(1700000000200, "DefaultRegion", "CG", "REQ1", "7F000001ABCD", 2,
                             "K1")
    after = SubAfterRecord("REQ1", "7F000001ABCD", 7, False, "K1", 4, 1700000000207)
    end = EndTransactionRecord(1700000000300, "DefaultRegion", "PG", "T", "ID", "", "",
                               "10.0.0.1:10911", MessageType.TRANS_HALF, "TX1",
                               "COMMIT_MESSAGE", True)
    expected = (_java("SubBefore", 1700000000200, "DefaultRegion", "CG", "REQ1",
                      "7F000001ABCD", 2, "K1")
                + _java("SubAfter", "REQ1", "7F000001ABCD", 7, "false", "K1", 4,
                        1700000000207)
                + _java("EndTransaction", 1700000000300, "DefaultRegion", "PG", "T", "ID", "",
                        "", "10.0.0.1:10911", 1, "TX1", "COMMIT_MESSAGE", "true"))
    data = encode_trace_data([before, after, end])
    assert data == expected.encode()
    assert decode_trace_data(data).records == [before, after, end]


def test_older_and_trailing_empty_forms_decode() -> None:
    # Pub without offsetMsgId (13 fields), SubAfter without context code and timestamp,
    # and a SubBefore whose empty keys Java's split dropped.
    old_pub = _java("Pub", 1, "R", "PG", "T", "ID", "", "", "h:1", 3, 4, 0, "false")
    old_after = _java("SubAfter", "REQ", "ID", 9, "TRUE", "")
    short_before = _java("SubBefore", 2, "R", "CG", "REQ", "ID", 0)
    decoded = decode_trace_data(old_pub + old_after + short_before)
    assert decoded.refused == []
    pub, after, before = decoded.records
    assert isinstance(pub, PubRecord) and pub.offset_msg_id == "" and not pub.success
    assert isinstance(after, SubAfterRecord) and after.success and after.cost_ms == 9
    assert after.timestamp == 0
    assert isinstance(before, SubBeforeRecord) and before.keys == ""


def test_a_bad_record_is_refused_and_the_others_kept() -> None:
    body = (_java("Pub", "notanumber", "R", "PG", "T", "ID", "", "", "h", 1, 1, 0, "x", "true")
            + _java("Future", "whatever") + _java("SubAfter", "REQ") + encode_trace_data(
                [PUB]).decode())
    decoded = decode_trace_data(body.encode())
    assert decoded.records == [PUB]
    assert [index for index, _ in decoded.refused] == [0, 2]
    assert "SubAfter" in decoded.refused[1][1]


def test_a_field_holding_a_separator_is_refused() -> None:
    with pytest.raises(ValueError, match="0x01 or 0x02"):
        encode_trace_data([SubAfterRecord("R\x02", "ID", 1, True, "")])


def test_keys_are_msg_ids_and_keys_once_each() -> None:
    after = SubAfterRecord("R", PUB.msg_id, 1, True, "K2 K3")
    assert trace_keys([PUB, after]) == [PUB.msg_id, "K1", "K2", "K3"]


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=C + F),
                max_size=20)
_ms = st.integers(0, 2**62)
_int = st.integers(0, 2**31 - 1)
_types = st.sampled_from(list(MessageType))

_records: st.SearchStrategy[TraceRecord] = st.one_of(
    st.builds(PubRecord, _ms, _text, _text, _text, _text, _text, _text, _text, _int, _int,
              _types, _text, st.booleans()),
    st.builds(SubBeforeRecord, _ms, _text, _text, _text, _text, _int, _text),
    st.builds(SubAfterRecord, _text, _text, _int, st.booleans(), _text, st.integers(0, 4),
              _ms),
    st.builds(EndTransactionRecord, _ms, _text, _text, _text, _text, _text, _text, _text,
              _types, _text, _text, st.booleans()),
)


@given(st.lists(_records, max_size=8))
def test_round_trip(records: list[TraceRecord]) -> None:
    decoded = decode_trace_data(encode_trace_data(records))
    assert decoded.refused == []
    assert decoded.records == records


@given(st.binary(max_size=200))
def test_any_bytes_decode_without_raising(data: bytes) -> None:
    decoded = decode_trace_data(data)
    assert len(decoded.records) + len(decoded.refused) <= data.count(b"\x02") + 1


@given(st.lists(st.tuples(_text, _text, _text, _int, _text), max_size=5), _ms, _text,
       _text, _text, _text, _int, _types, st.booleans())
def test_encode_pubs_is_encode_record_of_each(rows: list[tuple[str, str, str, int, str]],
                                              ts: int, region: str, group: str, topic: str,
                                              host: str, cost: int, msg_type: MessageType,
                                              ok: bool) -> None:
    from tidemq.codec.trace import encode_pubs, encode_record
    expected = [encode_record(PubRecord(ts, region, group, topic, msg_id, tags, keys, host,
                                        length, cost, msg_type, offset_id, ok))
                for msg_id, tags, keys, length, offset_id in rows]
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * 5
    assert encode_pubs(ts, region, group, topic, host, cost, msg_type, ok,
                       *columns).texts() == expected


@given(st.lists(st.tuples(_text, _text), max_size=5), _text, _text, _int, _ms, _text,
       _text, _text, _text, _int, _types, st.booleans())
def test_a_uniform_batch_encodes_as_each_record(
        ids: list[tuple[str, str]], tags: str, keys: str, length: int, ts: int, region: str,
        group: str, topic: str, host: str, cost: int, msg_type: MessageType,
        ok: bool) -> None:
    """Messages sharing tags, keys and body length (the joined form): the same text."""
    from tidemq.codec.trace import encode_pubs, encode_record
    expected = [encode_record(PubRecord(ts, region, group, topic, msg_id, tags, keys, host,
                                        length, cost, msg_type, offset_id, ok))
                for msg_id, offset_id in ids]
    n = len(ids)
    texts = encode_pubs(ts, region, group, topic, host, cost, msg_type, ok,
                        [m for m, _ in ids], [tags] * n, [keys] * n, [length] * n,
                        [o for _, o in ids])
    assert texts.texts() == expected
    assert all(t.startswith(texts.prefix) and t.endswith(texts.suffix) for t in expected)


def test_encode_pubs_refuses_a_separator() -> None:
    from tidemq.codec.trace import encode_pubs
    with pytest.raises(ValueError, match="0x01 or 0x02"):
        encode_pubs(1, "R", "G", "T", "h", 1, MessageType.NORMAL, True,
                    ["ID"], ["t\x01"], [""], [1], [""])


@given(st.lists(st.tuples(_text, _text), min_size=1, max_size=5), st.data(),
       st.sampled_from(["\x01", "\x02"]))
def test_a_separator_in_a_uniform_batch_is_refused(ids: list[tuple[str, str]],
                                                   data: st.DataObject, sep: str) -> None:
    from tidemq.codec.trace import encode_pubs
    columns = [[m for m, _ in ids], [o for _, o in ids]]
    column = data.draw(st.sampled_from(columns))
    row = data.draw(st.integers(0, len(ids) - 1))
    at = data.draw(st.integers(0, len(column[row])))
    column[row] = column[row][:at] + sep + column[row][at:]
    n = len(ids)
    with pytest.raises(ValueError, match="0x01 or 0x02"):
        encode_pubs(1, "R", "G", "T", "h", 1, MessageType.NORMAL, True, columns[0], [""] * n,
                    [""] * n, [7] * n, columns[1])


@given(st.integers(0, 8), st.sampled_from(["\x01", "\x02"]), st.integers(1, 3))
def test_a_separator_in_any_field_of_a_send_is_refused(field: int, sep: str, n: int) -> None:
    """Shared fields (checked once per producer, topic and host) and each message's own,
    for a single send and a batch, every time: a refusal is never remembered as a pass."""
    from tidemq.codec.trace import encode_pubs
    shared = ["R", "G", "T", "h"]
    own = [["ID"] * n, [""] * n, [""] * n, ["OFF"] * n]
    if field < 4:
        shared[field] += sep
    else:
        own[(field - 4) % 4][n - 1] += sep
    for _ in range(2):
        with pytest.raises(ValueError, match="0x01 or 0x02"):
            encode_pubs(1, *shared, 1, MessageType.NORMAL, True, own[0], own[1], own[2],
                        [7] * n, own[3])

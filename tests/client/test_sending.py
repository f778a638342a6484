"""Message checks, send preparation and send-response handling (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.client.config import ClientConfig
from tidemq.client.errors import (
    InvalidMessageError,
    InvalidPropertyError,
    InvalidTopicError,
    MessageTooBigError,
)
from tidemq.client.sending import (
    BatchCompression,
    batch_msg_id,
    build_batch,
    build_send,
    prepare_batch,
    prepare_message,
    prepare_send_batch,
    read_send_response,
    send_options,
)
from tidemq.client.validation import validate_group, validate_topic
from tidemq.codec.command import RemotingCommand, RequestCode
from tidemq.codec.headers import SendMessageRequestHeaderV2, SendMessageResponseHeader
from tidemq.codec.schema import HeaderFieldError
from tidemq.codec.uniqkey import UniqKeyGenerator
from tidemq.errors import BrokerResponseError, LocalProtocolError
from tidemq.formats.properties import decode_properties
from tidemq.types import Message, MessageQueue, SendResult, SendStatus

KEYS = UniqKeyGenerator("10.0.0.1", 42, 7)
MQ = MessageQueue("T", "broker-a", 3)
OK_EXT = {"msgId": "0A00000100002A9F0000000000000064", "queueId": "3", "queueOffset": "17",
          "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}


@pytest.mark.parametrize("topic", ["T", "a-b_c%d|e", "x" * 127])
def test_valid_topics(topic: str) -> None:
    validate_topic(topic)


@pytest.mark.parametrize("topic", ["", "has space", "x" * 128, "ü", "a/b"])
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)


def test_invalid_group() -> None:
    with pytest.raises(ValueError):
        validate_group("bad group")


def test_prepare_adds_key_and_wait_on_a_copy() -> None:
    msg = Message("T", b"x", {"TAGS": "a"})
    out = prepare_message(msg, max_size=10, keys=KEYS, now_ms=1_700_000_000_000,
                          sharding_key="order-1")
    assert msg.properties == {"TAGS": "a"}
    assert len(out.properties["UNIQ_KEY"]) == 32
    assert out.properties["WAIT"] == "true"
    assert out.properties["__SHARDINGKEY"] == "order-1"
    kept = prepare_message(Message("T", b"x", {"UNIQ_KEY": "K", "WAIT": "false"}),
                           max_size=10, keys=KEYS, now_ms=0)
    assert (kept.properties["UNIQ_KEY"], kept.properties["WAIT"]) == ("K", "false")


def test_prepare_rejects_bad_messages() -> None:
    with pytest.raises(MessageTooBigError) as info:
        prepare_message(Message("T", b"x" * 11), max_size=10, keys=KEYS, now_ms=0)
    assert (info.value.size, info.value.limit, info.value.topic) == (11, 10, "T")
    with pytest.raises(InvalidMessageError, match="empty"):
        prepare_message(Message("T", b""), max_size=10, keys=KEYS, now_ms=0)
    with pytest.raises(InvalidTopicError):
        prepare_message(Message("TBW102", b"x"), max_size=10, keys=KEYS, now_ms=0)
    with pytest.raises(InvalidTopicError):
        prepare_message(Message("bad topic", b"x"), max_size=10, keys=KEYS, now_ms=0)


@pytest.mark.parametrize(("props", "name"), [
    ({"KEYS": "a\x02b"}, "KEYS"), ({"KEYS": "a\x01b"}, "KEYS"), ({"TAGS": "x\x02"}, "TAGS"),
    ({"ok": "1", "bad\x01name": "v"}, "bad\x01name"), ({"\x02": "v"}, "\x02"),
])
def test_a_separator_in_a_property_is_refused_before_sending(props: dict[str, str],
                                                             name: str) -> None:
    with pytest.raises(InvalidPropertyError) as info:
        prepare_message(Message("T", b"x", props), max_size=10, keys=KEYS, now_ms=0)
    assert (info.value.topic, info.value.name) == ("T", name)
    assert "separator" in str(info.value)
    with pytest.raises(InvalidPropertyError):
        prepare_batch([Message("T", b"a"), Message("T", b"x", props)], max_size=1000,
                      keys=KEYS, now_ms=0)


def test_prepare_batch() -> None:
    msgs = [Message("T", b"a"), Message("T", b"b")]
    out = prepare_batch(msgs, max_size=1000, keys=KEYS, now_ms=0)
    assert batch_msg_id(out) == ",".join(m.properties["UNIQ_KEY"] for m in out)
    with pytest.raises(InvalidMessageError, match="mixes topics"):
        prepare_batch([Message("T", b"a"), Message("U", b"b")], max_size=1000, keys=KEYS,
                      now_ms=0)
    with pytest.raises(MessageTooBigError):
        prepare_batch([Message("T", b"a" * 60)] * 2, max_size=100, keys=KEYS, now_ms=0)
    with pytest.raises(InvalidMessageError):
        prepare_batch([], max_size=100, keys=KEYS, now_ms=0)


def test_build_send_uses_v2_keys() -> None:
    opts = send_options(ClientConfig(namesrv_addr=("127.0.0.1:9876",), client_ip="10.0.0.1"),
                        "G")
    msg = prepare_message(Message("T", b"body", {"TAGS": "a"}), max_size=100, keys=KEYS,
                          now_ms=5)
    cmd = build_send(msg, opts, MQ, now_ms=5, keys=KEYS)
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    header = SendMessageRequestHeaderV2.from_ext(cmd.ext_fields)
    assert (header.producer_group, header.topic, header.queue_id, header.broker_name) == (
        "G", "T", 3, "broker-a")
    assert (header.default_topic, header.default_topic_queue_nums) == ("TBW102", 4)
    props = decode_properties((header.properties or "").encode())
    assert props["UNIQ_KEY"] == msg.properties["UNIQ_KEY"]
    batch = build_batch([msg, msg], opts, MQ, now_ms=5, keys=KEYS)
    assert batch.code == RequestCode.SEND_BATCH_MESSAGE
    assert SendMessageRequestHeaderV2.from_ext(batch.ext_fields).batch


@pytest.mark.parametrize(("code", "status"), [
    (0, SendStatus.SEND_OK),
    (10, SendStatus.FLUSH_DISK_TIMEOUT),
    (11, SendStatus.SLAVE_NOT_AVAILABLE),
    (12, SendStatus.FLUSH_SLAVE_TIMEOUT),
])
def test_read_send_response_status(code: int, status: SendStatus) -> None:
    result = read_send_response(RemotingCommand(code=code, ext_fields=dict(OK_EXT)), MQ,
                                address="b:1", msg_id="UNIQ")
    assert result.status is status
    assert (result.msg_id, result.offset_msg_id) == ("UNIQ", OK_EXT["msgId"])
    assert (result.queue, result.queue_offset) == (MQ, 17)


def test_read_send_response_errors() -> None:
    with pytest.raises(BrokerResponseError) as info:
        read_send_response(RemotingCommand(code=2, remark="busy"), MQ, address="b:1",
                           msg_id="U")
    assert info.value.code == 2 and info.value.retriable and info.value.address == "b:1"
    with pytest.raises(HeaderFieldError):
        read_send_response(RemotingCommand(code=0), MQ, address="b:1", msg_id="U")
    # a durability doubt without ext still reports the status
    doubt = read_send_response(RemotingCommand(code=10), MQ, address="b:1", msg_id="U")
    assert doubt.status is SendStatus.FLUSH_DISK_TIMEOUT and doubt.queue_offset == -1


def test_batch_uniq_id_wins() -> None:
    ext = dict(OK_EXT, batchUniqId="BATCH")
    result = read_send_response(RemotingCommand(code=0, ext_fields=ext), MQ, address="b",
                                msg_id="A,B")
    assert result.msg_id == "BATCH"


def _via_schema(code: int, ext: dict[str, str], msg_id: str) -> SendResult | str:
    """What read_send_response gave before its plain-digits path: the header schema."""
    status = {0: SendStatus.SEND_OK, 10: SendStatus.FLUSH_DISK_TIMEOUT}[code]
    try:
        h = SendMessageResponseHeader.from_ext(ext)
    except HeaderFieldError as exc:
        return str(exc) if status is SendStatus.SEND_OK else SendResult(
            status, msg_id, "", MQ, -1)
    return SendResult(status, h.batch_uniq_id or msg_id, h.msg_id,
                      MessageQueue(MQ.topic, MQ.broker_name, h.queue_id), h.queue_offset,
                      h.transaction_id)


_number = st.one_of(st.integers(-(2**64), 2**64).map(str),
                    st.sampled_from(["", "+3", "-0", "0x1", " 1", "٣", "²", "1_0", "007"]))
_text = st.one_of(st.none(), st.sampled_from(["", "K", "ü"]))


@settings(deadline=None, max_examples=200)
@given(code=st.sampled_from([0, 10]), queue_id=st.one_of(st.none(), _number),
       offset=st.one_of(st.none(), _number), msg=_text, txn=_text, batch=_text)
def test_send_response_fields_as_the_schema_reads_them(
        code: int, queue_id: str | None, offset: str | None, msg: str | None,
        txn: str | None, batch: str | None) -> None:
    ext = {k: v for k, v in (("msgId", msg), ("queueId", queue_id), ("queueOffset", offset),
                             ("transactionId", txn), ("batchUniqId", batch)) if v is not None}
    expected = _via_schema(code, ext, "U")
    try:
        got: SendResult | str = read_send_response(
            RemotingCommand(code=code, ext_fields=ext), MQ, address="b", msg_id="U")
    except HeaderFieldError as exc:
        got = str(exc)
    assert got == expected


@pytest.mark.parametrize(("msgs", "error", "text", "size"), [
    ([], InvalidMessageError, "a batch needs at least one message", None),
    ([Message("T", b"a"), Message("V", b"b"), Message("U", b"c")], InvalidMessageError,
     "invalid message for topic 'T': a batch mixes topics 'T' and 'U'", None),
    ([Message("%RETRY%g", b"a"), Message("U", b"b")], InvalidTopicError,
     "invalid message for topic '%RETRY%g': a batch cannot go to a retry topic", None),
    ([Message("T", b"a"), Message("T", b"")], InvalidMessageError,
     "invalid message for topic 'T': the message body is empty", None),
    ([Message("T", b"a"), Message("T", b"a" * 11)], MessageTooBigError, None, 11),
    ([Message("T", b"a" * 11)], MessageTooBigError, None, 11),
    ([Message("T", b"a", {"DELAY": "2"})] * 2, LocalProtocolError,
     "batch messages cannot have a delay level", None),
])
def test_prepare_send_batch_refuses(msgs: list[Message], error: type[Exception],
                                    text: str | None, size: int | None) -> None:
    with pytest.raises(error) as info:
        prepare_send_batch(msgs, max_size=10, keys=KEYS, now_ms=0,
                           compression=BatchCompression())
    assert type(info.value) is error
    if text is not None:
        assert str(info.value) == text
    if size is not None:
        assert isinstance(info.value, MessageTooBigError) and info.value.size == size

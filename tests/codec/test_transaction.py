"""The transactional-message wire facts: sysFlag transaction types, the op-message body
and the END_TRANSACTION / CHECK_TRANSACTION_STATE headers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.codec.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from tidemq.codec.schema import HeaderFieldError
from tidemq.codec.transaction import (
    TransactionState,
    decode_op_body,
    encode_op_body,
    transaction_type,
    with_transaction_type,
)
from tidemq.errors import RemoteProtocolError

_offsets = st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=20)


def test_the_values_are_rocketmqs() -> None:
    assert [int(s) for s in TransactionState] == [0, 4, 8, 12]
    assert encode_op_body([7]) == b"7"
    assert decode_op_body(b"3,17") == [3, 17]


@given(_offsets)
def test_op_bodies_round_trip(offsets: list[int]) -> None:
    assert decode_op_body(encode_op_body(offsets)) == offsets


@given(st.binary(max_size=40))
def test_an_op_body_is_offsets_or_refused(data: bytes) -> None:
    try:
        offsets = decode_op_body(data)
    except RemoteProtocolError:
        return
    assert offsets == [int(part) for part in data.split(b",")]
    assert decode_op_body(encode_op_body(offsets)) == offsets


@pytest.mark.parametrize("body", [b"", b",", b"1,", b"-1", b"1 2", b"x", b"1" * 20])
def test_bad_op_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_op_body(body)


def test_encoding_nothing_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_op_body([])


@given(st.integers(0, 2**31 - 1), st.sampled_from(list(TransactionState)))
def test_the_transaction_type_replaces_only_its_bits(sys_flag: int,
                                                     state: TransactionState) -> None:
    changed = with_transaction_type(sys_flag, state)
    assert transaction_type(changed) is state
    assert changed & ~0xC == sys_flag & ~0xC


@given(st.builds(EndTransactionRequestHeader, producer_group=st.text(min_size=1),
                 tran_state_table_offset=st.integers(0, 2**63 - 1),
                 commit_log_offset=st.integers(0, 2**63 - 1),
                 commit_or_rollback=st.sampled_from([0, 8, 12]), msg_id=st.text(),
                 from_transaction_check=st.booleans(),
                 transaction_id=st.none() | st.text(), topic=st.none() | st.text()))
def test_end_transaction_headers_round_trip(h: EndTransactionRequestHeader) -> None:
    assert EndTransactionRequestHeader.from_ext(h.to_ext()) == h


@given(st.builds(CheckTransactionStateRequestHeader,
                 tran_state_table_offset=st.integers(0, 2**63 - 1),
                 commit_log_offset=st.integers(0, 2**63 - 1),
                 msg_id=st.none() | st.text(), transaction_id=st.none() | st.text(),
                 offset_msg_id=st.none() | st.text(), topic=st.none() | st.text()))
def test_check_headers_round_trip(h: CheckTransactionStateRequestHeader) -> None:
    assert CheckTransactionStateRequestHeader.from_ext(h.to_ext()) == h


def test_java_field_names() -> None:
    ext = EndTransactionRequestHeader(
        producer_group="g", tran_state_table_offset=1, commit_log_offset=2,
        commit_or_rollback=8, msg_id="m", from_transaction_check=True).to_ext()
    assert ext == {"producerGroup": "g", "tranStateTableOffset": "1", "commitLogOffset": "2",
                   "commitOrRollback": "8", "msgId": "m", "fromTransactionCheck": "true"}
    with pytest.raises(HeaderFieldError):
        EndTransactionRequestHeader.from_ext({"producerGroup": "g"})

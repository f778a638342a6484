"""Pull headers decoded once per consumer queue: always the header ``from_ext`` gives,
or its error, whatever the offset text and whether the rest was seen before."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.processors.pull_headers import PullHeaders
from tidemq.codec.headers import PullMessageRequestHeader
from tidemq.codec.schema import HeaderFieldError

_I64 = st.integers(-(2**63), 2**63 - 1)
_I32 = st.integers(-(2**31), 2**31 - 1)

headers = st.builds(
    PullMessageRequestHeader,
    consumer_group=st.text(min_size=1, max_size=8), topic=st.text(min_size=1, max_size=8),
    queue_id=_I32, queue_offset=_I64, max_msg_nums=_I32, sys_flag=_I32,
    commit_offset=_I64, suspend_timeout_millis=_I64,
    subscription=st.none() | st.text(max_size=8), sub_version=_I64,
    expression_type=st.none() | st.sampled_from(["TAG", "SQL92"]),
    max_msg_bytes=st.none() | _I32)
#: Offset texts: numbers as a client writes them, and what Java's parser refuses or
#: accepts beyond plain digits (signs, out of range, blanks, other digits).
_EDGES = ["9223372036854775807", "9223372036854775808", "-9223372036854775808",
          "-9223372036854775809", "99999999999999999999", "123456789012345678",
          "1234567890123456789", "+7", "-0", "007", "", " 1", "\u0663"]
offsets = st.one_of(_I64.map(str), st.integers(2**59, 2**65).map(str),
                    st.sampled_from(_EDGES),
                    st.text(alphabet="+-0123456789 x\u0663", max_size=22))


def _outcome(decode: object, ext: dict[str, str]) -> object:
    try:
        return decode(ext)  # type: ignore[operator]
    except HeaderFieldError as exc:
        return ("refused", str(exc))


@settings(max_examples=100, deadline=None)
@given(header=headers, texts=st.lists(offsets, min_size=1, max_size=4))
def test_each_pull_decodes_as_from_ext(header: PullMessageRequestHeader,
                                        texts: list[str]) -> None:
    table = PullHeaders()
    ext = header.to_ext()
    for text in [ext["queueOffset"], *texts]:  # the first fills the table
        ext["queueOffset"] = text
        assert _outcome(table.decode, dict(ext)) == _outcome(
            PullMessageRequestHeader.from_ext, dict(ext))
    assert len(table) == 1


def test_a_new_queue_or_any_other_field_is_decoded_again() -> None:
    table = PullHeaders(limit=2)
    base = PullMessageRequestHeader(
        consumer_group="g", topic="T", queue_id=0, queue_offset=5, max_msg_nums=32,
        sys_flag=6, commit_offset=0, suspend_timeout_millis=15000, sub_version=1)
    first = table.decode(base.to_ext())
    other = table.decode({**base.to_ext(), "queueId": "1", "queueOffset": "9"})
    assert (first.queue_id, first.queue_offset) == (0, 5)
    assert (other.queue_id, other.queue_offset) == (1, 9)
    again = table.decode({**base.to_ext(), "queueOffset": "12"})
    assert again == PullMessageRequestHeader.from_ext({**base.to_ext(), "queueOffset": "12"})
    assert first.queue_offset == 5  # the kept header is not changed by later pulls
    table.decode({**base.to_ext(), "queueId": "2"})
    assert len(table) == 1  # over the limit: the table started over
    with pytest.raises(HeaderFieldError, match="queueOffset"):
        table.decode({**base.to_ext(), "queueOffset": "nine"})
    with pytest.raises(HeaderFieldError):
        table.decode({k: v for k, v in base.to_ext().items() if k != "queueOffset"})

"""InnerBatchTags: the tag codes of an inner batch record's messages."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.inner_tags import InnerBatchTags
from tidemq.codec.compression import CompressionType, compress, sys_flag_for
from tidemq.formats.batch import encode_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import encode_properties
from tidemq.formats.record import encode_record

INNER = 0x40 | 0x80
TAG = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF,
                            blacklist_characters="\x01\x02"), min_size=1, max_size=12)


def record(tags: list[str | None], ctype: CompressionType | None = None) -> memoryview:
    body = encode_batch([(b"m", encode_properties({"TAGS": t} if t else {}), 0) for t in tags])
    flag = INNER
    if ctype is not None:
        body, flag = compress(body, ctype), flag | sys_flag_for(ctype)
    return memoryview(bytes(encode_record(topic=b"T", queue_id=0, body=body,
                                          properties=b"INNER_NUM\x01%d\x02" % len(tags),
                                          sys_flag=flag)))


@given(st.lists(st.none() | TAG, min_size=1, max_size=20),
       st.none() | st.sampled_from(list(CompressionType)))
def test_codes_are_those_of_the_inner_tags(tags: list[str | None],
                                           ctype: CompressionType | None) -> None:
    codes = InnerBatchTags(1 << 20)(0, record(tags, ctype))
    assert codes == {tags_code(t) for t in tags}


def test_unreadable_records_are_told_apart_and_cached_by_offset() -> None:
    inner = InnerBatchTags(1 << 20, capacity=2)
    good = record(["a"])
    broken = memoryview(bytes(good[:-3]))  # TOTALSIZE overruns what is there
    assert inner(10, broken) is None
    assert inner(20, good) == {tags_code("a")}
    assert inner(20, broken) == {tags_code("a")}  # the cached answer for offset 20
    bomb = record(["a"] * 200, CompressionType.ZSTD)
    assert InnerBatchTags(64)(0, bomb) is None  # inflates past the cap

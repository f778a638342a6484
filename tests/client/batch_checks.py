"""One check that a MessageBatch holds exactly the given messages, shared by the tests of
the columnar consume path."""

from __future__ import annotations

from tidemq.client import MessageBatch
from tidemq.types import MessageExt


def assert_batch_is(batch: MessageBatch, want: list[MessageExt]) -> None:
    """Every column, every lazy row accessor, slices and the objects equal ``want``'s
    (columns first, before the batch has made any object)."""
    assert len(batch) == len(want)
    assert batch.queue_offsets.tolist() == [m.queue_offset for m in want]
    assert batch.bodies == [m.body for m in want]
    assert batch.body_lengths.tolist() == [len(m.body) for m in want]
    assert batch.store_timestamps.tolist() == [m.store_timestamp for m in want]
    assert batch.born_timestamps.tolist() == [m.born_timestamp for m in want]
    assert batch.flags.tolist() == [m.flag for m in want]
    assert batch.sys_flags.tolist() == [m.sys_flag for m in want]
    assert batch.commit_log_offsets.tolist() == [m.commit_log_offset for m in want]
    assert batch.reconsume_times.tolist() == [m.reconsume_times for m in want]
    for i, m in enumerate(want):
        assert batch.properties(i) == m.properties
        assert (batch.tags(i), batch.keys(i), batch.msg_id(i)) == (m.tags, m.keys, m.msg_id)
        assert batch.topic(i) == m.topic
    assert batch[1:].bodies == [m.body for m in want[1:]]
    assert batch[::2].queue_offsets.tolist() == [m.queue_offset for m in want[::2]]
    assert batch.messages() == want
    assert batch[1:].messages() == want[1:]
    assert list(batch) == want
    assert batch[-1] == want[-1]

"""The batch encoders (record by record, column-wise, tiled template) write, once patched,
what encode_record writes for each message; so does a stamp of client entries into the
template uniform_head gives."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.formats.batch import ENTRY_OVERHEAD
from tidemq.formats.batch import encode_batch as encode_entries
from tidemq.formats.record import HostAddr, encode_record
from tidemq.formats.record.batch import encode_batch, patch_batch, uniform_head
from tidemq.formats.record.loops import stamp_records

V4 = HostAddr(b"\x0a\x01\x02\x03", 40001)
V4_STORE = HostAddr(b"\xc0\xa8\x00\x07", 10911)
V6 = HostAddr(bytes(range(16)), 40002)
I32 = st.integers(-(2**31), 2**31 - 1)
TS = st.integers(0, 2**62)


def _expected(topic: str, queue_id: int, bodies: list[bytes], props: list[bytes],
              flags: list[int], sys_flag: int, born_ts: int, born: HostAddr,
              store: HostAddr, reconsume: int, qo: int, phys: int, store_ts: int,
              steps: list[int] | None = None, prepared: int = 0) -> bytes:
    out = bytearray()
    for i, (body, prop, flag) in enumerate(zip(bodies, props, flags, strict=True)):
        out += encode_record(
            topic=topic.encode(), queue_id=queue_id, body=body, properties=prop, flag=flag,
            sys_flag=sys_flag, born_timestamp=born_ts, born_host=born, store_host=store,
            store_timestamp=store_ts, queue_offset=qo, physical_offset=phys + len(out),
            reconsume_times=reconsume, prepared_tx_offset=prepared)
        qo += 1 if steps is None else steps[i]
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 30), uniform=st.booleans(),
       topic=st.sampled_from(["T", "Topic-é", "L" * 128]),
       born=st.sampled_from([V4, V6]), store=st.sampled_from([V4_STORE, V6]),
       sys_flag=st.integers(0, 0xFF), stepped=st.booleans(),
       prepared=st.one_of(st.just(0), st.integers(1, 2**62)))
def test_a_patched_batch_is_the_records_one_by_one(
        data: st.DataObject, n: int, uniform: bool, topic: str, born: HostAddr,
        store: HostAddr, sys_flag: int, stepped: bool, prepared: int) -> None:
    if uniform:
        blen, plen = data.draw(st.integers(0, 40)), data.draw(st.integers(0, 30))
        bodies = data.draw(st.lists(st.binary(min_size=blen, max_size=blen),
                                    min_size=n, max_size=n))
        props = data.draw(st.lists(st.binary(min_size=plen, max_size=plen),
                                   min_size=n, max_size=n))
    else:
        bodies = data.draw(st.lists(st.binary(max_size=40), min_size=n, max_size=n))
        props = data.draw(st.lists(st.binary(max_size=30), min_size=n, max_size=n))
    flags = data.draw(st.lists(I32, min_size=n, max_size=n))
    born_ts, store_ts, reconsume = data.draw(TS), data.draw(TS), data.draw(st.integers(0, 16))
    qo, phys = data.draw(st.integers(0, 2**40)), data.draw(st.integers(0, 2**50))
    steps = data.draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)) if stepped else None
    enc = encode_batch(topic, 7, bodies, props, flags, sys_flag=sys_flag,
                       born_timestamp=born_ts, born_host=born, store_host=store,
                       reconsume_times=reconsume, prepared_tx_offset=prepared)
    patch_batch(enc, qo, phys, store_ts, queue_step=steps)
    want = _expected(topic, 7, bodies, props, flags, sys_flag, born_ts, born, store,
                     reconsume, qo, phys, store_ts, steps, prepared)
    assert bytes(enc.buf) == want
    assert list(enc.sizes) == [b - a for a, b in zip(enc.starts, [*enc.starts[1:], len(want)],
                                                         strict=True)]


@dataclass
class Entries:
    data: bytes
    n: int
    entry_size: int
    body_length: int
    cluster: bytes

    @property
    def properties_length(self) -> int:
        return self.entry_size - ENTRY_OVERHEAD - self.body_length + len(self.cluster)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 70), blen=st.integers(0, 30),
       cluster=st.sampled_from([b"", b"CLUSTER\x01c\x02"]), at=st.integers(0, 9),
       topic=st.sampled_from(["T", "Topic-é"]))
def test_client_entries_stamped_into_the_template_are_the_records_of_their_messages(
        data: st.DataObject, n: int, blen: int, cluster: bytes, at: int, topic: str) -> None:
    """What the store writes straight into a segment's map for a uniform batch: the
    records encoded one by one, whatever surrounds them there. A batch of a few messages
    (an auto-batcher's) takes the template as a large one does."""
    bodies = data.draw(st.lists(st.binary(min_size=blen, max_size=blen), min_size=n,
                                max_size=n))
    props = [b"UNIQ_KEY\x01%08X\x02" % i for i in range(n)]
    flags = data.draw(st.lists(I32, min_size=n, max_size=n))
    raw = encode_entries(list(zip(bodies, props, flags, strict=True)))
    entries = Entries(raw, n, len(raw) // n, blen, cluster)
    head = uniform_head(topic, entries, sys_flag=0x2, born_host=V4, store_host=V4_STORE)
    assert head is not None
    want = _expected(topic, 3, bodies, [p + cluster for p in props], flags, 0x2, 9, V4,
                     V4_STORE, 0, 100, 4096, 11)
    segment = bytearray(b"\xee" * (at + len(want) + 5))
    stamp_records(memoryview(segment)[at : at + len(want)], head, raw, n, entries.entry_size,
                  blen, len(head) - entries.properties_length, 3, 9, 100, 4096, 11)
    assert segment[at : at + len(want)] == want
    assert segment[:at] == b"\xee" * at and segment[at + len(want) :] == b"\xee" * 5


def test_client_entries_the_template_cannot_take_are_left_to_the_caller() -> None:
    raw = encode_entries([(b"ab", b"", 0)] * 8)
    entries = Entries(raw, 8, len(raw) // 8, 2, b"")
    assert uniform_head("T", entries, sys_flag=0, born_host=V6, store_host=V4_STORE) is None
    assert uniform_head("T", entries, sys_flag=0, born_host=V4, store_host=V6) is None
    assert uniform_head("L" * 128, entries, sys_flag=0, born_host=V4,
                        store_host=V4_STORE) is None

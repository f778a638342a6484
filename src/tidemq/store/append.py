"""What a put is given: one message (:class:`MessageInput`) or a client batch of one
layout as columns (:class:`UniformBatch`). Encoding them is the record package's
(:mod:`tidemq.formats.record.batch`); writing them, the appender's
(:mod:`tidemq.store.appender`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

from tidemq.formats.batch import ENTRY_OFF_BODY, ENTRY_OFF_FLAG, ENTRY_OVERHEAD
from tidemq.store.index_keys import KeyColumns

__all__ = ["MessageInput", "UniformBatch"]


class MessageInput(NamedTuple):
    """One message to store. ``keys`` are indexed (UNIQ_KEY first, then KEYS)."""

    body: bytes | bytearray | memoryview
    properties: bytes = b""
    flag: int = 0
    tags_code: int = 0
    keys: Sequence[str] = ()


class UniformBatch(Sequence[MessageInput]):
    """The messages of a client batch body (:mod:`tidemq.formats.batch`) whose entries
    share one layout, as columns over the body's bytes instead of an object per message.

    Entry ``i`` is message ``i``: its body and flag as the entry holds them, its property
    bytes followed by ``cluster`` (``CLUSTER`` added by the broker, or empty), and the
    batch-wide ``tags_code``; ``keys`` are its index keys (``None``: none). The caller
    vouches for the layout (:func:`tidemq.formats.batch.uniform_layout`): ``n``
    entries of ``entry_size`` bytes with ``body_length``-byte bodies.

    It is a sequence of :class:`MessageInput` like the list it stands for, so anything
    that iterates a put's messages works on it; :meth:`MessageStore.put_batch
    <tidemq.store.message_store.MessageStore.put_batch>` writes its records straight into
    the segment from one template (:func:`tidemq.formats.record.batch.uniform_head`,
    :func:`tidemq.formats.record.loops.stamp_records`), to the same bytes.
    ``data`` may be a view of a request's body that lives no longer than the put: the
    put reads it and keeps nothing of it.
    """

    __slots__ = ("body_length", "cluster", "data", "entry_size", "keys", "n",
                 "properties_length", "tags_code")

    def __init__(self, data: bytes | bytearray | memoryview, n: int, entry_size: int,
                 body_length: int, cluster: bytes, tags_code: int,
                 keys: KeyColumns | None) -> None:
        props_start = ENTRY_OVERHEAD + body_length
        if n < 1 or len(data) != n * entry_size or props_start > entry_size:
            raise ValueError(f"{len(data)} bytes are not {n} entries of {entry_size} "
                             f"bytes with {body_length}-byte bodies")
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} key rows for {n} messages")
        self.data = data
        self.n = n
        self.entry_size = entry_size
        self.body_length = body_length
        self.cluster = cluster
        self.tags_code = tags_code
        self.keys = keys
        #: Length of every message's stored property bytes (the entry's and ``cluster``).
        self.properties_length = entry_size - props_start + len(cluster)

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> MessageInput: ...

    @overload
    def __getitem__(self, i: slice) -> list[MessageInput]: ...

    def __getitem__(self, i: int | slice) -> MessageInput | list[MessageInput]:
        if isinstance(i, slice):
            return [self._message(j) for j in range(self.n)[i]]
        return self._message(range(self.n)[i])

    def __iter__(self) -> Iterator[MessageInput]:
        return map(self._message, range(self.n))

    def _message(self, i: int) -> MessageInput:
        base = i * self.entry_size
        data, blen = self.data, self.body_length
        at = base + ENTRY_OFF_BODY
        body = memoryview(data)[at : at + blen]
        props = bytes(data[base + ENTRY_OVERHEAD + blen : base + self.entry_size]) + self.cluster
        at = base + ENTRY_OFF_FLAG
        flag = int.from_bytes(data[at : at + 4], "big", signed=True)
        keys = self.keys[i] if self.keys is not None else ()
        return MessageInput(body, props, flag, self.tags_code, keys)

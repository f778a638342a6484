"""SEND_BATCH_MESSAGE bodies (outer batches, remoting.md §3.2) split into store inputs,
and inner-batch bodies (BatchCQ topics) counted.

A batch whose entries share one layout and differ only in their UNIQ_KEY values is split
with a few array comparisons instead of a property parse per entry, and goes to the store
as columns over the request body (:class:`UniformBatch`), its keys to the index as columns
(:class:`KeyColumns`). Anything else is walked entry by entry with the send processor's
own per-message check, so its errors are that check's.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tidemq.broker.lmq import names_lmqs
from tidemq.errors import CorruptRecord, ResponseCode, error_for_code
from tidemq.formats.batch import ENTRY_OVERHEAD, count_entries, first_layout, iter_batch
from tidemq.formats.hashing import tags_code
from tidemq.formats.properties import (
    MAX_PROPERTIES_BYTES,
    parse_property_text,
    property_text_error,
    user_keys,
    wants_flush,
)
from tidemq.formats.record.loops import uniform_lengths, uniform_split
from tidemq.store.append import UniformBatch
from tidemq.store.index_keys import KeyColumns
from tidemq.store.message_store import MessageInput

__all__ = ["NO_BATCH_FAN_OUT", "UNIFORM_SMALL", "BatchSplitter", "first_fans_out",
           "inner_count", "inner_shape", "new_input"]

#: Below this many entries an inner batch is counted entry by entry and a batch's offset ids
#: are formatted one by one.
UNIFORM_SMALL = 4
#: An entry's PROPERTIESLENGTH and BODYLENGTH (formats/batch).
_PLEN = struct.Struct(">h")
_BLEN = struct.Struct(">i")
#: ``MessageInput`` from a 5-tuple without the keyword-argument call.
new_input: Callable[[tuple[Any, ...]], MessageInput] = functools.partial(
    tuple.__new__, MessageInput)


_MULTI_DISPATCH_KEY = b"INNER_MULTI_DISPATCH\x01"
_MULTI_DISPATCH_PAIR = b"\x02" + _MULTI_DISPATCH_KEY
NO_BATCH_FAN_OUT = ("INNER_MULTI_DISPATCH (LMQ fan-out) is not supported in inner batches "
                     "(BatchCQ topics): send such messages one by one or to a classic topic")


def first_fans_out(plain: bytes | bytearray | memoryview) -> bool:
    """Whether the first message of a batch body (already counted, so well formed) names
    LMQs. Only the first: scanning every message's properties would cost an inner batch
    of small messages a tenth of its whole send path, and the TideMQ client refuses any
    batch holding such a message before sending it."""
    if len(plain) < ENTRY_OVERHEAD:
        return False
    (blen,) = _BLEN.unpack_from(plain, 16)
    (plen,) = _PLEN.unpack_from(plain, 20 + blen)
    start = ENTRY_OVERHEAD + blen
    return _names_lmqs_in(plain, start, start + plen)


def _names_lmqs_in(plain: bytes | bytearray | memoryview, start: int, end: int) -> bool:
    """Whether the properties ``plain[start:end]`` name ``INNER_MULTI_DISPATCH``: the exact
    name only (:func:`names_lmqs`), at the start or after a separator."""
    if not isinstance(plain, (bytes, bytearray)):  # a view: its properties alone copied
        plain, start, end = bytes(plain[start:end]), 0, end - start
    return (plain.startswith(_MULTI_DISPATCH_KEY, start, end)
            or plain.find(_MULTI_DISPATCH_PAIR, start, end) >= 0)


def inner_count(plain: bytes | bytearray | memoryview) -> int:
    """:func:`count_entries` of an inner batch body. The usual batch of entries of one
    layout is proven in one call -- every entry's TOTALSIZE, BODYLENGTH and
    PROPERTIESLENGTH bytes equal the first entry's, the check of :func:`uniform_layout`
    (:func:`~tidemq.formats.record.loops.uniform_lengths`, which keeps the GIL: array
    gathers may drop it, and a busy dispatcher thread then holds the loop up). Anything
    else is counted by :func:`count_entries`, errors included."""
    layout = first_layout(plain)
    if layout is not None:
        size, blen = layout
        n = len(plain) // size
        if n >= UNIFORM_SMALL and uniform_lengths(plain, n, size, blen):
            return n
    return count_entries(plain)


def inner_shape(plain: bytes | bytearray | memoryview) -> tuple[int, bool]:
    """``(inner_count(plain), first_fans_out(plain))`` reading the first entry's length
    fields once: the usual batch of one layout is counted and its first message's
    properties searched without a second pass over its header. Errors are
    :func:`inner_count`'s."""
    layout = first_layout(plain) if len(plain) >= UNIFORM_SMALL * ENTRY_OVERHEAD else None
    if layout is not None:
        size, blen = layout
        n = len(plain) // size
        if n >= UNIFORM_SMALL and uniform_lengths(plain, n, size, blen):
            return n, _names_lmqs_in(plain, ENTRY_OVERHEAD + blen, size)  # first entry's
    return count_entries(plain), first_fans_out(plain)


#: :meth:`BatchSplitter.property_shape`'s answer.
PropertyShape = tuple[int, int, bytes, int, tuple[str, ...] | None, bool]
#: Property shapes a splitter keeps; past this many it forgets them all.
_SHAPES_KEPT = 256
#: The longest property bytes whose shape is kept (the usual batch's are about a hundred):
#: what the kept shapes hold stays under a MiB.
_SHAPE_MAX_BYTES = 1024


#: One message's store input and whether its producer waits for the flush, from its body,
#: property text and flag (the send processor's check of a single message).
MessageCheck = Callable[[bytes | bytearray | memoryview, str | None, int],
                        tuple[MessageInput, bool]]


class BatchSplitter:
    """Outer batches into store inputs; see the module docstring."""

    def __init__(self, *, max_body: int, cluster_prop: bytes, index: bool,
                 message: MessageCheck) -> None:
        self._max_body = max_body
        self._cluster_prop = cluster_prop
        self._index = index
        self._message = message
        #: :meth:`property_shape` answers by the property bytes around the UNIQ_KEY value.
        self._shapes: dict[tuple[bytes, bytes, int], PropertyShape] = {}

    def split(self, body: bytes | bytearray | memoryview
               ) -> tuple[Sequence[MessageInput], bool]:
        """The store inputs of an outer batch and whether its producer waits for the
        flush; a message naming LMQs is refused (:meth:`split_fan_out` takes them)."""
        uniform = self.uniform(body)
        if uniform is not None:
            return uniform
        msgs, wait, _texts = self._walk(body, False)
        return msgs, wait

    def split_fan_out(self, body: bytes | bytearray | memoryview
                      ) -> tuple[Sequence[MessageInput], bool, list[str | None] | None]:
        """:meth:`split`, where messages may name LMQs (RIP-28): also the property text of
        each message that does (``None`` for one that does not), or ``None`` when none
        does. A uniform batch (:meth:`uniform`) has none: its entries' properties differ
        only in UNIQ_KEY, and the first one's do not name LMQs."""
        uniform = self.uniform(body)
        if uniform is not None:
            return uniform[0], uniform[1], None
        return self._walk(body, True)

    def walk_fan_out(self, body: bytes | bytearray | memoryview
                     ) -> tuple[list[MessageInput], bool, list[str | None] | None]:
        """:meth:`split_fan_out` of a batch :meth:`uniform` declined: walked entry by
        entry."""
        return self._walk(body, True)

    def _walk(self, body: bytes | bytearray | memoryview, fan_out: bool
              ) -> tuple[list[MessageInput], bool, list[str | None] | None]:
        msgs: list[MessageInput] = []
        texts: list[str | None] = []
        fans = False
        wait = True
        try:
            for entry in iter_batch(body):
                props = entry.properties.tobytes().decode("utf-8") if entry.properties else None
                fans_out = props is not None and names_lmqs(props)
                if fans_out and not fan_out:
                    raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, NO_BATCH_FAN_OUT)
                m, w = self._message(entry.body, props, entry.flag)
                msgs.append(m)
                texts.append(props if fans_out else None)
                fans = fans or fans_out
                wait = wait and w
        except (CorruptRecord, UnicodeDecodeError) as exc:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}") from None
        if not msgs:
            raise error_for_code(ResponseCode.MESSAGE_ILLEGAL, "the batch is empty")
        return msgs, wait, texts if fans else None

    def uniform(self, body: bytes | bytearray | memoryview
                       ) -> tuple[Sequence[MessageInput], bool] | None:
        """:meth:`split` for the usual producer batch, or ``None`` (walk it entry by entry).

        The usual batch has entries of one layout whose property strings are the same
        bytes except for the UNIQ_KEY value (ASCII, no separator in it). Then the first
        entry's properties describe every entry (TAGS, KEYS, WAIT, CLUSTER), the values are
        valid UTF-8, and only the UNIQ_KEYs are read per entry -- which is what the walk
        would find, entry by entry. Anything else, errors included, is walked. A batch of
        any size, the few entries of an auto-batcher's batch at a low rate included, is
        read by one compiled call (:func:`~tidemq.formats.record.loops.uniform_split`:
        the layout, the comparison, and the UNIQ_KEY column copied out while the entries
        are in the cache, for the key index that reads it later) and handed to the store
        as columns (:class:`UniformBatch`), never as an object per message.
        """
        split = uniform_split(body, self._max_body, self._index)
        if split is None:
            return None
        n, size, blen, ustart, uend, key, column = split
        shapes = self._shapes
        shape = shapes.get(key)
        if shape is None:
            pstart = ENTRY_OVERHEAD + blen
            shape = self.property_shape(bytes(body[pstart:size]))
            # the shape is the same where the split found the UNIQ_KEY value
            if shape is None or shape[0] != ustart or shape[1] != uend:
                return None
            if key[2] <= _SHAPE_MAX_BYTES:
                if len(shapes) >= _SHAPES_KEPT:
                    shapes.clear()
                shapes[key] = shape
        _ustart, _uend, cluster, tags, keys, wait = shape
        key_columns = None
        if keys is not None and (keys or column is not None):
            uniq = (None if column is None
                    else np.frombuffer(column, np.uint8).reshape(n, uend - ustart))
            key_columns = KeyColumns(uniq, keys, n)
        return UniformBatch(body, n, size, blen, cluster, tags, key_columns), wait

    def property_shape(self, first: bytes) -> PropertyShape | None:
        """What the first entry's property bytes say of every entry of a uniform batch:
        ``(ustart, uend, cluster, tags_code, keys, wait)`` -- where its UNIQ_KEY value is
        (``plen, plen``: nowhere), the CLUSTER pair the broker adds, the tags code, the
        index keys besides UNIQ_KEY (``None``: nothing is indexed) and whether the
        producer waits for the flush -- or ``None`` when the batch must be walked.

        :meth:`uniform` keeps the answers by the bytes around the UNIQ_KEY value and the
        length: of two property strings that differ only in a UNIQ_KEY value of
        separator-free ASCII (which the split checks of every entry), this says
        the same."""
        plen = len(first)
        try:
            text = first.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if names_lmqs(text) or property_text_error(text) is not None:
            return None
        props = parse_property_text(text)
        uniq = props.get("UNIQ_KEY")
        ustart = uend = plen
        if uniq is not None:
            ustart = text.find("UNIQ_KEY\x01") + 9
            uend = ustart + len(uniq)
            if (not text.isascii() or text.count("UNIQ_KEY\x01") != 1
                    or (ustart > 9 and text[ustart - 10] != "\x02")
                    or text[uend : uend + 1] not in ("", "\x02")):
                return None
        cluster = b"" if "CLUSTER" in props else self._cluster_prop
        if plen + len(cluster) > MAX_PROPERTIES_BYTES:
            return None
        return (ustart, uend, cluster, tags_code(props.get("TAGS")),
                user_keys(props) if self._index else None, wants_flush(props))

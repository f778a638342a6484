"""The store inputs of a shared send parent's usual children, read by column.

A producer's ``send_multi`` sends children whose property texts have the same names in
the same order (``UNIQ_KEY``, ``WAIT``...) and differ only in their values. For such a
parent, what the send processor reads from each child's text one child at a time --
the check and the parse (:func:`~tidemq.formats.properties.parse_checked_property_text`),
the index keys, the tags, the stored property bytes -- is read here for every child at
once: one join, one split, a few C-level passes over the columns. The answer is the one
the child-by-child reading gives (:meth:`SendProcessor._input
<tidemq.broker.processors.send.SendProcessor._input>`) or ``None``, and then the caller
reads the children one by one: anything unusual -- a property that changes how a child is
stored or routed (``CLUSTER``, ``KEYS``, ``TAGS``, a delay, a timer, a transaction, any
``INNER_`` but a fan-out's ``INNER_MULTI_DISPATCH`` where the caller allows it), a child
without properties, a pair with an empty side, texts of another shape, a queue the topic
lacks, an inner-batch flag, a body or property string over its limit -- decides nothing
here. Children that fan out to LMQs are read as any other: their LMQ names are the
caller's to decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import cycle, repeat
from operator import and_, itemgetter, methodcaller
from typing import cast

from tidemq.broker.processors.batch_split import new_input
from tidemq.codec.shared_send import SendEntry
from tidemq.formats.properties import MAX_PROPERTIES_BYTES
from tidemq.store.message_store import MessageInput

__all__ = ["ChildPut", "column_puts"]

#: What the send processor stores a child as: queue id, store input, sysflag, born time.
ChildPut = tuple[int, MessageInput, int, int]

#: Substrings that send a child another way (a delay, a timer, a transaction: the
#: child-by-child reading looks for them anywhere in its text; ``INNER_`` too, but for
#: a fan-out's name, see :func:`column_puts`).
_DIVERTED = ("DELAY\x01", "TIMER_", "TRAN_MSG\x01")
#: The one ``INNER_`` property a child may have here: its fan-out (``fan_out``).
_FAN_OUT = "INNER_MULTI_DISPATCH"
#: Property names that change a child's store input beyond what is read here, and the
#: empty name (a pair a reader drops).
_UNUSUAL_NAMES = ("CLUSTER", "KEYS", "TAGS", "")
_COUNT_PAIRS = methodcaller("count", "\x02")
_COUNT_NAMES = methodcaller("count", "\x01")
_LAST = itemgetter(-1)
_INNER_BATCH = 0x80
#: Below this many children the child-by-child reading costs less than the set-up.
_MIN_CHILDREN = 4


def column_puts(entries: Sequence[SendEntry], *, queues: int, max_body: int,
                cluster_prop: bytes, index: bool, fan_out: bool = False
                ) -> list[ChildPut] | None:
    """Every child's put as the child-by-child reading makes it, or ``None`` (see the
    module docstring). ``queues``: the topic's queue count; ``max_body``: the largest
    body; ``cluster_prop``: the ``CLUSTER`` pair stored with a message naming none;
    ``index``: whether the store indexes keys (else no child has any); ``fan_out``:
    whether children whose only ``INNER_`` property is ``INNER_MULTI_DISPATCH`` are
    read here (then every child has it: one shape)."""
    n = len(entries)
    if n < _MIN_CHILDREN:
        return None
    qids, sys_flags, borns, flags, texts, bodies = zip(*entries, strict=True)
    first_text = texts[0]
    if first_text is not None and (first_text.startswith("KEYS\x01")
                                   or "\x02KEYS\x01" in first_text):
        # keyed children (trace messages: 24 KB of msgIds each) are refused below, once
        # every text is joined and split: refused before that work
        return None
    if (min(qids) < 0 or max(qids) >= queues or any(map(and_, sys_flags, repeat(_INNER_BATCH)))
            or max(map(len, bodies)) > max_body or None in texts or "" in texts
            or set(map(_LAST, texts)) != {"\x02"}):
        return None
    joined = "".join(cast("tuple[str, ...]", texts))
    # An empty value is a pair a reader drops: read one by one.
    if "\x01\x02" in joined or any(map(joined.__contains__, _DIVERTED)):
        return None
    inner = joined.count("INNER_")  # each child's fan-out name, and nothing else
    if inner and (not fan_out or inner != n):
        return None
    counts = set(map(_COUNT_PAIRS, texts))
    if len(counts) != 1:
        return None
    (k,) = counts  # pairs a child, every text ending with its last pair's separator
    segments = joined.split("\x02")
    segments.pop()  # after the last separator: nothing
    if set(map(_COUNT_NAMES, segments)) != {1}:  # each one name and one value
        return None
    first = [segment.partition("\x01")[0] for segment in segments[:k]]
    heads = [f"{name}\x01" for name in first]
    if (len(set(first)) != k or any(map(first.__contains__, _UNUSUAL_NAMES))
            # one shape: every child's names those of the first, no name twice
            or not all(map(str.startswith, segments, cycle(heads)))):
        return None
    if inner and _FAN_OUT not in first:
        return None
    keys: Iterable[tuple[str, ...]] = repeat((), n)
    if index and "UNIQ_KEY" in first:
        at = first.index("UNIQ_KEY")
        uniqs = list(map(itemgetter(slice(len(heads[at]), None)), segments[at::k]))
        keys = list(zip(uniqs, strict=True))  # (UNIQ_KEY,): nothing empty (checked above)
    raws = list(map(bytes.__add__, map(str.encode, cast("tuple[str, ...]", texts)),
                    repeat(cluster_prop)))
    if max(map(len, raws)) > MAX_PROPERTIES_BYTES:
        return None
    msgs = list(map(new_input, zip(bodies, raws, flags, repeat(0), keys)))
    return list(zip(qids, msgs, sys_flags, borns, strict=True))

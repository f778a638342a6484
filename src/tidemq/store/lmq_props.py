"""A fan-out batch's stored properties and fan-outs, once its LMQ offsets are given (RIP-28).

The appender assigns a batch's LMQ offsets under the append lock
(``tidemq.store.appender``), then writes each message's offsets into its stored
properties as ``INNER_MULTI_QUEUE_OFFSET`` and hands the dispatcher each message's
fan-out: its names and its offsets. :func:`offset_props` is the compiled
``lmq_offset_props`` (``tidemq.formats._crecords``): one call a batch, without the
offsets' texts, a join and a format a message, and two tuples a message built by Python
steps, that :func:`py_offset_props`, its twin and the fallback where the module is not
built or ``TIDEMQ_NO_NATIVE=1`` is set, makes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import index
from typing import cast

from tidemq.formats.record.native import compiled

__all__ = ["NATIVE_OFFSET_PROPS", "FanTarget", "offset_props", "py_offset_props"]

#: A message's fan-out: the LMQs it names and its offset in each.
FanTarget = tuple[tuple[str, ...], tuple[int, ...]]


def py_offset_props(targets: Sequence[Sequence[str]], props: Sequence[bytes],
                    offsets: Sequence[int], head: bytes
                    ) -> tuple[list[bytes], list[FanTarget | None]]:
    """Each message's stored properties and fan-out. ``targets[i]``: the LMQs message
    ``i`` names; ``props[i]``: its properties; ``offsets``: every target's offset (an
    integer of 64 bits at most), laid end to end in the order of ``targets``. A message
    naming LMQs stores ``props[i] + head``, its offsets in decimal, comma-separated, and
    ``b"\\x02"``; one naming none stores ``props[i]`` as it is and has no fan-out
    (``None``)."""
    lists: tuple[tuple[str, ...], ...] = tuple(map(tuple, targets))
    props, offsets = tuple(props), tuple(offsets)
    if len(lists) != len(props):
        raise ValueError(f"lmq_offset_props: {len(lists)} target lists but {len(props)} "
                         "properties")
    total = sum(map(len, lists))
    if total != len(offsets):
        raise ValueError(f"lmq_offset_props: {total} LMQ targets but {len(offsets)} offsets")
    stored: list[bytes] = []
    fan: list[FanTarget | None] = []
    at = 0
    for names, raw in zip(lists, props, strict=True):
        if not isinstance(raw, bytes):
            raise TypeError("lmq_offset_props: properties are not bytes")
        if not names:
            stored.append(raw)
            fan.append(None)
            continue
        end = at + len(names)
        digits = b",".join(map(b"%d".__mod__, map(index, offsets[at:end])))
        stored.append(b"%s%s%s\x02" % (raw, head, digits))
        fan.append((names, offsets[at:end]))
        at = end
    return stored, fan


_compiled = compiled("lmq_offset_props")
#: Whether :func:`offset_props` is the compiled one.
NATIVE_OFFSET_PROPS = _compiled is not None
#: :func:`py_offset_props`, compiled where it can be.
offset_props = cast(
    "Callable[[Sequence[Sequence[str]], Sequence[bytes], Sequence[int], bytes], "
    "tuple[list[bytes], list[FanTarget | None]]]",
    _compiled if _compiled is not None else py_offset_props)

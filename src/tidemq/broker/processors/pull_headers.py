"""PULL_MESSAGE headers, decoded once per consumer queue rather than once per pull.

A consumer pulls each of its queues again and again with the same ext fields but for
``queueOffset`` (the client keeps one ext per queue and changes only that value), and a
long poll that is answered brings the next pull at once: decoding the whole header schema
for each of them costs the broker more than the rest of a held pull's bookkeeping.
:class:`PullHeaders` keeps the header decoded from each distinct set of the other fields
and reads only ``queueOffset`` per request, by the schema's own rules. A request whose
fields are new, or whose offset the fast check does not accept, is decoded in full
(errors included) by :meth:`~tidemq.codec.schema.Header.from_ext`: the result is always
the header ``from_ext`` would return.
"""

from __future__ import annotations

from collections.abc import Mapping

from tidemq.codec.headers import PullMessageRequestHeader

__all__ = ["PullHeaders"]

_OFFSET_KEY = PullMessageRequestHeader.ext_keys()["queue_offset"]
_OFFSET_SPEC = next(f for f in PullMessageRequestHeader.__schema__
                    if f.name == "queue_offset")
_NAME = PullMessageRequestHeader.__name__
#: Plain digit strings this long are always within a long's range.
_SAFE_DIGITS = 18
_new = object.__new__


class PullHeaders:
    """Decoded pull headers by their ext fields but ``queueOffset``; see the module
    docstring. At most ``limit`` are kept (then the table starts over)."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._decoded: dict[tuple[tuple[str, str], ...], PullMessageRequestHeader] = {}

    def __len__(self) -> int:
        return len(self._decoded)

    def decode(self, ext: Mapping[str, str]) -> PullMessageRequestHeader:
        """The header of ``ext``; raises :class:`~tidemq.errors.HeaderFieldError` as
        :meth:`PullMessageRequestHeader.from_ext` does."""
        offset = ext.get(_OFFSET_KEY)
        if offset is None:
            return PullMessageRequestHeader.from_ext(ext)
        rest = dict(ext)
        del rest[_OFFSET_KEY]
        key = tuple(rest.items())
        known = self._decoded.get(key)
        if known is None:
            header = PullMessageRequestHeader.from_ext(ext)
            if len(self._decoded) >= self.limit:
                self._decoded.clear()
            self._decoded[key] = header
            return header
        if len(offset) <= _SAFE_DIGITS and offset.isascii() and offset.isdigit():
            value = int(offset)
        else:
            value = _OFFSET_SPEC.parse(_NAME, offset)  # the schema's rules and errors
        header = _new(PullMessageRequestHeader)
        fields = header.__dict__
        fields.update(known.__dict__)
        fields["queue_offset"] = value
        return header

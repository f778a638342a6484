"""The ``ends`` field of a QUERY_LOGICAL_QUEUE_MAPPING answer (docs/protocol.md): how far
the answering broker knows each physical queue of the topic's segments to reach.

A JSON list of rows ``[broker, queueId, end]``: the physical queue ``queueId`` of
``broker`` holds at least ``end`` messages (exclusive end, physical offsets). A forced cut
of a logical queue whose leader is dead takes its end from these rows.
"""

from __future__ import annotations

import json

__all__ = ["decode_ends", "encode_ends"]


def encode_ends(ends: dict[tuple[str, int], int]) -> str:
    return json.dumps([[b, q, e] for (b, q), e in sorted(ends.items())])


def decode_ends(text: str | None) -> dict[tuple[str, int], int]:
    """The rows of an ``ends`` field, the highest end per queue; {} when absent or
    malformed (the field is evidence, never required)."""
    out: dict[tuple[str, int], int] = {}
    if not text:
        return out
    try:
        rows = json.loads(text)
        for broker, queue_id, end in rows:
            key = (str(broker), int(queue_id))
            out[key] = max(int(end), out.get(key, -1))
    except (ValueError, TypeError):
        return {}
    return out

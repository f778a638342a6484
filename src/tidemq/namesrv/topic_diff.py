"""Which topics of a registration differ from the table last applied for its broker name.

The name server rebuilds a topic's queues when the broker's DataVersion changed
(:mod:`tidemq.namesrv.routes`). A topic whose config is the one it was last built from,
and whose queues nothing else has touched since, would be rebuilt to what it holds
already: a broker that created one topic among twenty thousand changed one. Finding it
takes a walk of the whole table, so the name server does it on a thread for a large
registration, with its decoding, against the table the last one left (a mapping that is
replaced, never changed in place).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tidemq.codec.bodies import TopicConfig

__all__ = ["TableDiff", "diff_topics", "index_topics"]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class TableDiff:
    """A registration's topic table against the one applied before it."""

    #: The table compared against (``None``: none), as the route table held it.
    base: Mapping[str, TopicConfig] | None
    #: The registration's table by topic name: what the route table holds once applied.
    topics: Mapping[str, TopicConfig]
    #: Topics new or different against ``base``, in the registration's order (every
    #: topic when there is no base).
    changed: tuple[str, ...]


def index_topics(table: Mapping[str, TopicConfig]) -> dict[str, TopicConfig]:
    """``table`` keyed by each config's topic name (the last one wins, as applying does)."""
    return {tc.topic_name: tc for tc in table.values()}


def diff_topics(base: Mapping[str, TopicConfig] | None,
                table: Mapping[str, TopicConfig]) -> TableDiff:
    """``table`` against ``base``: a walk of the whole table, meant for a thread when it
    is large. Nothing here is changed."""
    topics = index_topics(table)
    if base is None:
        return TableDiff(base, topics, tuple(topics))
    return TableDiff(base, topics, tuple(name for name, tc in topics.items()
                                         if base.get(name) != tc))

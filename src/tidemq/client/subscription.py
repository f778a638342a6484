"""A consumer's tag subscription to one topic (Java ``FilterAPI.buildSubscriptionData``).

The expression is ``*`` (everything) or tags joined by ``||``: ``"TagA || TagB"``.
Brokers may filter by the tags' hash codes; the client re-checks every message by exact
tag (remoting.md §2.8), so a message without a tag matches only ``*``.
"""

from __future__ import annotations

import dataclasses

from tidemq.codec.bodies import SubscriptionData
from tidemq.formats.hashing import java_string_hash

__all__ = ["SUB_ALL", "Subscription"]

SUB_ALL = "*"


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str = SUB_ALL
    tags: frozenset[str] = frozenset()
    version: int = 0

    @classmethod
    def parse(cls, topic: str, expression: str | None = SUB_ALL, *,
              version: int = 0) -> Subscription:
        """``version`` is the subscription's timestamp in ms (``subVersion``)."""
        text = (expression or "").strip()
        if not text or text == SUB_ALL:
            return cls(topic, SUB_ALL, frozenset(), version)
        tags = frozenset(t.strip() for t in text.split("||") if t.strip())
        if not tags:
            return cls(topic, SUB_ALL, frozenset(), version)
        return cls(topic, text, tags, version)

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def matches(self, tag: str | None) -> bool:
        """Whether a message with ``tag`` belongs to this subscription."""
        return not self.tags or (tag is not None and tag in self.tags)

    def to_data(self) -> SubscriptionData:
        """The heartbeat form (``tagsSet`` and their ``String.hashCode`` codes)."""
        tags = sorted(self.tags)
        return SubscriptionData(
            topic=self.topic, sub_string=self.expression, tags_set=tags,
            code_set=[java_string_hash(t) for t in tags], sub_version=self.version,
            expression_type="TAG",
        )

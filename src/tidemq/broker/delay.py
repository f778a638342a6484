"""Where a delayed message waits: delay levels and timer messages (remoting.md §2.7 step 6).

A message is *parked* instead of stored in its topic when

* it has ``DELAY`` = level ``1..N`` (higher levels mean level N; ``<= 0`` means none): it
  goes to ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` and is due at its store time plus
  the level's delay (``messageDelayLevel``, upstream's "1s 5s 10s 30s 1m ... 2h"; units
  ms, s, m, h, d);
* or, without ``DELAY``, it has ``TIMER_DELIVER_MS`` (absolute epoch ms),
  ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (relative to its arrival) naming a time in the
  future: it goes to ``rmq_sys_wheel_timer`` queue 0 with ``TIMER_OUT_MS`` = that time.
  A time further away than ``timerMaxDelaySec`` is refused (MESSAGE_ILLEGAL), as upstream.

Either way the real destination travels in ``REAL_TOPIC`` / ``REAL_QID``, as upstream. A
``DELAY`` wins over timer properties, which are then dropped (upstream does the same).
Transactional half and rollback messages are never parked. :meth:`DelayPolicy.divert` only
decides; :mod:`tidemq.broker.schedule` delivers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from tidemq.errors import ConfigError
from tidemq.formats.properties import decode_properties, encode_properties

__all__ = [
    "DELAY",
    "REAL_QID",
    "REAL_TOPIC",
    "SCHEDULE_TOPIC",
    "TIMER_PROPERTIES",
    "TIMER_TOPIC",
    "DelayError",
    "DelayPolicy",
    "Diversion",
    "parse_delay_levels",
]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_OUT_MS = "TIMER_OUT_MS"
#: What asks for a timer; cleared when a DELAY wins and when the message is delivered.
TIMER_PROPERTIES = (TIMER_DELIVER_MS, TIMER_DELAY_MS, TIMER_DELAY_SEC)

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL_RE = re.compile(r"^([0-9]{1,9})(ms|s|m|h|d)$")
_INT_RE = re.compile(r"^-?[0-9]{1,18}$")
_TRANSACTION_BITS = 0xC
_PREPARED = 0x4
_ROLLBACK = 0xC


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``"1s 5s 100ms 1m"`` -> ``(1000, 5000, 100, 60000)``: the delay of each level, in ms."""
    levels = []
    for word in text.split():
        m = _LEVEL_RE.match(word)
        if m is None:
            raise ConfigError(f"messageDelayLevel entry {word!r} is not <number><ms|s|m|h|d>",
                              key="messageDelayLevel")
        levels.append(int(m.group(1)) * _UNITS[m.group(2)])
    if not levels:
        raise ConfigError("messageDelayLevel names no level", key="messageDelayLevel")
    return tuple(levels)


class DelayError(ValueError):
    """A delay property the broker refuses; ``prop`` names it."""

    def __init__(self, prop: str, reason: str) -> None:
        super().__init__(f"{prop}: {reason}")
        self.prop = prop
        self.reason = reason


@dataclasses.dataclass(frozen=True, slots=True)
class Diversion:
    """Store the message in ``topic``/``queue_id`` with ``properties`` instead."""

    topic: str
    queue_id: int
    properties: str


def _int(props: dict[str, str], name: str) -> int:
    value = props[name].strip()
    if not _INT_RE.match(value):
        raise DelayError(name, f"{value[:32]!r} is not an integer")
    return int(value)


def _append(text: str, props: dict[str, str], pairs: dict[str, str]) -> str:
    """``text`` (whose decoded form is ``props``) with ``pairs`` set: appended when none
    of their names is there yet, else the whole text re-encoded, so a name appears once."""
    if not any(name in props for name in pairs):
        return text + encode_properties(pairs).decode("utf-8")
    return encode_properties({**props, **pairs}).decode("utf-8")


class DelayPolicy:
    def __init__(self, levels: Sequence[int], *, max_timer_ms: int,
                 clock: Callable[[], int]) -> None:
        self.levels = tuple(levels)
        self.max_timer_ms = max_timer_ms
        self.clock = clock

    @property
    def max_level(self) -> int:
        return len(self.levels)

    def delay_of(self, level: int) -> int:
        """The delay in ms of ``level`` (levels past the ladder use its last step)."""
        return self.levels[max(1, min(level, self.max_level)) - 1]

    def level_of(self, properties: str) -> int:
        """The clamped DELAY level of a property string, 0 for none."""
        props = decode_properties(properties.encode("utf-8")) if properties else {}
        return min(_int(props, DELAY), self.max_level) if DELAY in props else 0

    def divert(self, properties: str | None, topic: str, queue_id: int,
               sys_flag: int = 0) -> Diversion | None:
        """Where a message sent to ``topic``/``queue_id`` is parked, or ``None`` to store
        it as sent. Raises :class:`DelayError` for an unusable value."""
        if not properties or ("DELAY\x01" not in properties and "TIMER_" not in properties):
            return None
        if sys_flag & _TRANSACTION_BITS in (_PREPARED, _ROLLBACK):
            return None
        props = decode_properties(properties.encode("utf-8"))
        level = min(_int(props, DELAY), self.max_level) if DELAY in props else 0
        if level > 0:
            if any(p in props for p in TIMER_PROPERTIES):
                for p in TIMER_PROPERTIES:
                    props.pop(p, None)
                properties = encode_properties(props).decode("utf-8")
            return Diversion(SCHEDULE_TOPIC, level - 1, _append(properties, props, {
                DELAY: str(level), REAL_TOPIC: topic, REAL_QID: str(queue_id)}))
        due = self._timer_due(props)
        if due is None:
            return None
        return Diversion(TIMER_TOPIC, 0, _append(properties, props, {
            TIMER_OUT_MS: str(due), REAL_TOPIC: topic, REAL_QID: str(queue_id)}))

    def _timer_due(self, props: dict[str, str]) -> int | None:
        now = self.clock()
        if TIMER_DELIVER_MS in props:
            name, due = TIMER_DELIVER_MS, _int(props, TIMER_DELIVER_MS)
        elif TIMER_DELAY_SEC in props:
            name, due = TIMER_DELAY_SEC, now + _int(props, TIMER_DELAY_SEC) * 1000
        elif TIMER_DELAY_MS in props:
            name, due = TIMER_DELAY_MS, now + _int(props, TIMER_DELAY_MS)
        else:
            return None
        if due <= now:
            return None  # due already: stored and delivered at once
        if due - now > self.max_timer_ms:
            raise DelayError(name, f"the delivery time is more than {self.max_timer_ms // 1000}"
                                   " s away (timerMaxDelaySec)")
        return due

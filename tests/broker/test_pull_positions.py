"""PullPositions: where each group's pulls reached, forgotten by group, topic or both."""

from __future__ import annotations

from tidemq.broker.pull_positions import PullPositions


def test_positions_are_noted_per_group_topic_and_queue() -> None:
    pulled = PullPositions()
    pulled.note("g", "T", 0, 5)
    pulled.note("g", "T", 0, 9)
    pulled.note("g", "T", 1, 2)
    pulled.note("h", "T", 0, 1)
    pulled.note("g", "U", 0, 7)
    assert [pulled.query("g", "T", 0), pulled.query("g", "T", 1), pulled.query("h", "T", 0),
            pulled.query("g", "U", 0), pulled.query("g", "T", 2),
            pulled.query("x", "T", 0)] == [9, 2, 1, 7, None, None]
    pulled.forget(group="g", topic="T")
    assert (pulled.query("g", "T", 0), pulled.query("h", "T", 0),
            pulled.query("g", "U", 0)) == (None, 1, 7)
    pulled.forget(topic="T")
    assert pulled.query("h", "T", 0) is None and pulled.query("g", "U", 0) == 7
    pulled.forget(group="g")
    assert pulled.query("g", "U", 0) is None

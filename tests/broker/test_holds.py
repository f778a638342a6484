"""The held-pull table on its own: who a dispatch round wakes, what stays held, and
what a wake-up leaves behind (queue lists, deadlines), for a single pull alone on its
queue (the usual case, taken the short way), for several pulls on one queue and for a
batch parent waiting on several queues."""

from __future__ import annotations

import asyncio
from typing import Any

from tidemq.broker.holds import Held, HoldTable
from tidemq.codec.command import RemotingCommand, RequestCode

A, B = ("T", 0), ("T", 1)


class Answers:
    """The requests answered, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, held: Held) -> None:
        assert isinstance(held.payload, str)
        self.names.append(held.payload)


def _table() -> tuple[HoldTable, Answers]:
    table = HoldTable()
    table.attach(asyncio.get_running_loop())
    return table, Answers()


def _hold(table: HoldTable, answers: Answers, name: str, *waits: tuple[tuple[str, int], int],
          conn: Any = None) -> Held:
    return table.hold(conn, RemotingCommand.request(RequestCode.PULL_MESSAGE), waits, 60_000,
                      answers, name)


async def test_a_lone_pull_wakes_once_its_queue_passes_its_offset() -> None:
    table, answers = _table()
    held = _hold(table, answers, "p", (A, 5))
    table.notify(*A, 5)  # not past 5 yet
    assert answers.names == [] and table.held_count == 1
    table.notify(*B, 9)  # another queue
    assert answers.names == []
    table.notify(*A, 6)
    assert answers.names == ["p"] and table.held_count == 0 and table.woken == 1
    assert held.timer is not None and held.timer.cancelled()
    table.notify(*A, 7)  # answered once
    assert answers.names == ["p"]
    _hold(table, answers, "q", (A, 6))  # the queue's list starts anew
    table.notify(*A, 7)
    assert answers.names == ["p", "q"]


async def test_pulls_on_one_queue_wake_by_their_own_offsets() -> None:
    table, answers = _table()
    _hold(table, answers, "low", (A, 3))
    _hold(table, answers, "high", (A, 8))
    table.notify(*A, 5)
    assert answers.names == ["low"] and table.held_count == 1
    table.notify(*A, 8)
    assert answers.names == ["low"]
    table.notify(*A, 9)  # the one left, now alone on the queue
    assert answers.names == ["low", "high"] and table.held_count == 0


async def test_a_parent_woken_by_one_queue_leaves_the_others() -> None:
    table, answers = _table()
    _hold(table, answers, "parent", (A, 3), (B, 3))
    _hold(table, answers, "single", (B, 3))
    table.notify(*A, 4)
    assert answers.names == ["parent"]
    table.notify(*B, 4)  # only the single pull is left on B
    assert answers.names == ["parent", "single"] and table.held_count == 0


async def test_a_closed_connection_leaves_nothing_to_wake() -> None:
    table, answers = _table()
    gone, kept = object(), object()
    _hold(table, answers, "gone", (A, 1), conn=gone)
    _hold(table, answers, "kept", (A, 1), conn=kept)
    table.drop_connection(gone)
    table.notify(*A, 2)
    assert answers.names == ["kept"] and table.held_count == 0

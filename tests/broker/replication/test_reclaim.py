"""The bodies a returning master reads from its replicas: what is accepted, and what is
refused with a reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.replication.reclaim import parse_delay_progress, parse_offset_table
from tidemq.broker.timers import TimerCheckpoint

TABLES = st.dictionaries(
    st.tuples(st.text("abT", min_size=1, max_size=3), st.text("gh", min_size=1, max_size=3))
    .map(lambda tg: f"{tg[0]}@{tg[1]}"),
    st.dictionaries(st.integers(0, 100), st.integers(0, 2**62), max_size=4), max_size=4)


@given(TABLES)
def test_an_offset_table_reads_back_as_served(table: dict[str, dict[int, int]]) -> None:
    served = json.loads(json.dumps(
        {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in table.items()}}))
    assert parse_offset_table(served) == table


@pytest.mark.parametrize("body, reason", [
    ([], "offsetTable"),
    ({"offsetTable": []}, "offsetTable"),
    ({"offsetTable": {"nogroup": {"0": 1}}}, "topic@group"),
    ({"offsetTable": {"T@g": {"0": -1}}}, "negative"),
    ({"offsetTable": {"T@g": {"x": 1}}}, "invalid literal"),
])
def test_a_bad_offset_table_is_refused_saying_why(body: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_offset_table(body)


@given(st.dictionaries(st.integers(1, 18), st.integers(0, 2**40), max_size=6),
       st.none() | st.builds(TimerCheckpoint, st.integers(0, 2**40), st.integers(0, 2**45),
                             st.integers(0, 2**40)))
def test_delay_progress_reads_back_as_served(levels: dict[int, int],
                                             timer: TimerCheckpoint | None) -> None:
    body: dict[str, Any] = {"offsetTable": {str(k): v for k, v in levels.items()}}
    if timer is not None:
        body["timerCheckpoint"] = timer.to_json()
    assert parse_delay_progress(json.loads(json.dumps(body))) == (levels, timer)


def test_a_bad_timer_checkpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="not a timer checkpoint"):
        parse_delay_progress({"offsetTable": {}, "timerCheckpoint": {"frontierMs": -3}})

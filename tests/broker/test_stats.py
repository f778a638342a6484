"""RateMeter: the per-second rate and the per-minute sums of the last day."""

from __future__ import annotations

import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemq.broker.stats import DAY_HOURS, HOUR_MINUTES, BrokerStats, RateMeter


def test_rate_and_sums() -> None:
    meter = RateMeter(window=10)
    for sec in range(120, 130):
        meter.add(3, now=sec + 0.5)
    assert meter.rate(now=130.0) == 3.0
    assert meter.total == 30
    assert meter.sum_since(60, now=130.0) == 30  # minute 2 (120..179 s)
    assert meter.sum_since(60, now=190.0) == 0
    assert meter.sum_since(120, now=190.0) == 30
    assert meter.sum_since(86_400, now=130.0 + 86_400) == 0  # a day later, gone


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 3 * 86_400), st.integers(0, 1000)), max_size=60),
       st.sampled_from([60, 600, 3600, 7200, 86_400]))
def test_sum_since_counts_the_whole_slots_asked(adds: list[tuple[int, int]],
                                                seconds: int) -> None:
    meter = RateMeter()
    adds.sort()
    for sec, n in adds:
        meter.add(n, now=float(sec))
    now = adds[-1][0] if adds else 0
    slot, span = (60, seconds // 60) if seconds <= 3600 else (3600, seconds // 3600)
    first = now // slot - span + 1
    expected = sum(n for sec, n in adds if sec // slot >= first)
    assert meter.sum_since(seconds, now=float(now)) == expected
    assert meter.total == sum(n for _, n in adds)


def test_a_meter_keeps_a_bounded_number_of_buckets() -> None:
    meter = RateMeter()
    for sec in range(0, 3 * 86_400, 7):
        meter.add(1, now=float(sec))
    assert len(meter._minutes) <= HOUR_MINUTES and len(meter._hours) <= DAY_HOURS
    assert meter.sum_since(86_400, now=3 * 86_400 - 1) == len(range(2 * 86_400, 3 * 86_400, 7))


def test_gets_are_counted_per_topic_and_group() -> None:
    stats = BrokerStats()
    stats.on_get("T", "G", 4, 400)
    stats.on_get("T", "H", 1, 100)
    stats.on_get("U", "G", 2, 200)
    assert stats.topic_group_get["T@G"].total == 4
    assert stats.group_get["G"].total == 6
    for i in range(500):  # nearly all within one second: the meters' shared fast path
        stats.on_get("T" if i % 5 else "U", "G", 2, 100)
    assert (stats.get_msgs.total, stats.get_bytes.total) == (1007, 50_700)
    assert stats.topic_group_get["T@G"].sum_since(120) == 804
    assert stats.topic_group_get["U@G"].sum_since(120) == 202
    assert stats.group_get["G"].sum_since(120) == 1006
    assert stats.get_bytes.sum_since(120) == 50_700


def test_puts_are_counted_in_total_per_topic_and_in_bytes() -> None:
    stats = BrokerStats()
    for i in range(500):  # nearly all within one second: the meters' shared fast path
        stats.on_put("T" if i % 5 else "U", 2, 100)
    assert (stats.put_msgs.total, stats.put_bytes.total) == (1000, 50_000)
    assert (stats.topic_put["T"].total, stats.topic_put["U"].total) == (800, 200)
    assert stats.put_msgs.sum_since(120) == 1000  # what a second held is settled on reading
    assert stats.put_bytes.sum_since(120) == 50_000
    assert stats.topic_put["U"].sum_since(120) == 200


def test_a_deleted_topic_or_group_leaves_no_meters() -> None:
    stats = BrokerStats()
    stats.on_put("T", 1, 10)
    stats.on_put("U", 1, 10)
    for topic, group in (("T", "G"), ("T", "H"), ("U", "G"), ("a@b", "G")):
        stats.on_get(topic, group, 1, 10)
    stats.forget_topic("T")
    assert set(stats.topic_put) == {"U"}
    assert set(stats.topic_group_get) == {"U@G", "a@b@G"}
    stats.forget_group("G")
    assert set(stats.group_get) == {"H"} and stats.topic_group_get == {}


@settings(deadline=None, max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50), st.booleans()),
                max_size=60))
def test_reading_between_adds_changes_no_count(adds: list[tuple[int, int, bool]]) -> None:
    """Adds within one second are held until a later second or a reader settles them:
    a meter read after every add and one never read agree."""
    read, unread = RateMeter(window=5), RateMeter(window=5)
    adds.sort()
    for sec, n, look in adds:
        read.add(n, now=sec + 0.25)
        unread.add(n, now=sec + 0.25)
        if look:
            read.rate(now=sec + 0.5)
            read.sum_since(60, now=sec + 0.5)
    end = (adds[-1][0] if adds else 0) + 1.0
    for meter in (read, unread):
        meter.rate(now=end)
    assert read._buckets == unread._buckets and read._minutes == unread._minutes
    assert read.rate(now=end) == unread.rate(now=end)
    assert read.sum_since(120, now=end) == unread.sum_since(120, now=end)


def test_a_new_day_makes_the_totals_this_mornings_and_this_mornings_yesterdays() -> None:
    monday = datetime.date(2026, 11, 30)
    stats = BrokerStats(today=monday)
    stats.on_put("T", 5, 50)
    stats.on_get("T", "G", 2, 20)
    stats.roll_day(monday)  # the same day: nothing moves
    assert (stats.put_today_morning, stats.get_today_morning) == (0, 0)
    stats.roll_day(monday + datetime.timedelta(days=1))
    assert (stats.put_today_morning, stats.get_today_morning) == (5, 2)
    assert (stats.put_yesterday_morning, stats.get_yesterday_morning) == (0, 0)
    stats.on_put("T", 3, 30)
    stats.roll_day(monday + datetime.timedelta(days=2))
    assert (stats.put_today_morning, stats.put_yesterday_morning) == (8, 5)
    assert (stats.get_today_morning, stats.get_yesterday_morning) == (2, 2)

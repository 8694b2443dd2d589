"""The open-loop scheduler and latency buckets of tests/bench/open_loop.py, on made-up times."""

from __future__ import annotations

import pytest

from tests.bench.open_loop import SUB_BUCKETS, LatencyHistogram, Schedule


def test_on_time_sender_takes_one_message_per_period() -> None:
    schedule = Schedule(rate_per_s=1000, duration_s=0.005)
    assert schedule.count == 5
    assert list(schedule.take_due(0.0)) == [0]
    assert schedule.wait_s(0.0) == pytest.approx(0.001)
    assert list(schedule.take_due(0.0004)) == []  # nothing new is due yet
    assert list(schedule.take_due(0.001)) == [1]
    assert schedule.wait_s(0.0015) == pytest.approx(0.0005)


def test_late_sender_takes_every_missed_message_with_its_own_due_time() -> None:
    schedule = Schedule(rate_per_s=100, duration_s=1.0)
    schedule.take_due(0.0)
    late = schedule.take_due(0.0525)  # the sender stalled for 52.5 ms
    assert list(late) == [1, 2, 3, 4, 5]
    # each is charged from when it was due, not from when it was sent
    assert [round(0.0525 - schedule.due_s(i), 4) for i in late] == [0.0425, 0.0325, 0.0225,
                                                                     0.0125, 0.0025]
    assert schedule.wait_s(0.0525) == pytest.approx(0.0075)


def test_schedule_ends_at_its_count() -> None:
    schedule = Schedule(rate_per_s=10, duration_s=1.0)
    assert len(schedule.take_due(100.0)) == 10
    assert schedule.done and list(schedule.take_due(200.0)) == []


def test_histogram_bounds_each_value_within_its_precision() -> None:
    histogram = LatencyHistogram()
    for value_us in (1, 3, 1000, 1234.5, 65_000, 3_600_000_000):
        bucket = histogram.bucket(value_us)
        upper = histogram.upper_us(bucket)
        assert value_us < upper <= value_us * (1 + 2 / SUB_BUCKETS), (value_us, upper)


def test_histogram_percentiles_and_max() -> None:
    histogram = LatencyHistogram()
    for _ in range(990):
        histogram.record(1000.0)  # 1 ms
    for _ in range(10):
        histogram.record(50_000.0)  # 50 ms: the top 1 %
    summary = histogram.summary_ms()
    assert summary["count"] == 1000
    assert 1.0 <= summary["p50_ms"] <= 1.07
    assert 1.0 <= summary["p99_ms"] <= 1.07  # rank 990 is still a 1 ms value
    assert 50.0 <= summary["p999_ms"] <= 50.0 * 1.07 and summary["max_ms"] == 50.0
    assert sum(histogram.buckets().values()) == 1000


def test_values_under_one_microsecond_count_as_one() -> None:
    histogram = LatencyHistogram()
    histogram.record(0.2)
    assert histogram.bucket(0.2) == histogram.bucket(1.0)
    assert histogram.percentile_us(0.5) <= histogram.upper_us(histogram.bucket(1.0))

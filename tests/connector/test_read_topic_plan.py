"""read_topic's tail plan (pure): per queue, from the table's end to the queue's end; a table
behind the log's first offset is a gap; a table past the queue's end is a recreated topic."""

from __future__ import annotations

from connector.spark.offsets import QueueRef
from connector.spark.planning import Bounds
from connector.spark.read_topic import tail_plan

A0, A1, B0 = QueueRef("t", "a", 0), QueueRef("t", "a", 1), QueueRef("t", "b", 0)


def test_the_tail_starts_where_the_table_ends_and_at_the_start_where_it_has_nothing() -> None:
    plan = tail_plan({A0: 40, A1: None}, {A0: Bounds(0, 50), A1: Bounds(0, 7), B0: Bounds(3, 9)})
    assert plan.starting == {A0: 40, A1: 0, B0: 3}
    assert plan.ending == {A0: 50, A1: 7, B0: 9}
    assert plan.rows == 10 + 7 + 6
    assert not plan.gaps and not plan.ahead


def test_a_table_behind_the_logs_first_offset_is_a_gap_and_the_tail_starts_at_the_first() -> None:
    plan = tail_plan({A0: 5}, {A0: Bounds(20, 30)})
    assert plan.gaps == {A0: (5, 20)}
    assert plan.starting == {A0: 20}


def test_a_table_past_the_queues_end_is_ahead_and_adds_no_tail() -> None:
    plan = tail_plan({A0: 100, A1: 3}, {A0: Bounds(0, 12), A1: Bounds(0, 3)})
    assert plan.ahead == (A0,)
    assert plan.starting == {A0: 12, A1: 3}
    assert plan.rows == 0

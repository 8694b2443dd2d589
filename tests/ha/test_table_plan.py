"""The topic-table planner (ha/broker/table_plan.py): table tests, no IO."""

from __future__ import annotations

import pytest

from ha.broker.table_plan import (
    Ahead,
    CommitPlan,
    Fenced,
    QueueState,
    QueueTake,
    fence_app_id,
    fence_version,
    plan_commit,
    queue_app_id,
    split_fence,
    transactions,
    water_fill,
)


def q(queue_id: int, table: int | None, low: int, high: int) -> QueueState:
    return QueueState(queue_id, table, low, high)


@pytest.mark.parametrize(("epoch", "sequence"), [(0, 0), (0, 1), (7, 3), ((1 << 31) - 1,
                                                                         (1 << 32) - 1)])
def test_fence_version_round_trips_and_orders_by_epoch_first(epoch: int, sequence: int) -> None:
    version = fence_version(epoch, sequence)
    assert split_fence(version) == (epoch, sequence)


def test_any_commit_of_a_newer_epoch_has_a_higher_fence() -> None:
    assert fence_version(3, (1 << 32) - 1) < fence_version(4, 0) < fence_version(4, 1)


@pytest.mark.parametrize(("pending", "total", "expected"), [
    ({0: 10, 1: 10}, 100, {0: 10, 1: 10}),  # everything fits
    ({0: 100, 1: 100}, 10, {0: 5, 1: 5}),  # even split
    ({0: 100, 1: 100, 2: 100}, 10, {0: 4, 1: 3, 2: 3}),  # remainder to the lowest ids
    ({0: 2, 1: 100, 2: 100}, 10, {0: 2, 1: 4, 2: 4}),  # a small queue gives the rest away
    ({0: 0, 1: 50}, 10, {0: 0, 1: 10}),  # an idle queue takes nothing
    ({0: 1, 1: 1, 2: 1}, 2, {0: 1, 1: 1, 2: 0}),
    ({}, 10, {}),
])
def test_water_fill(pending: dict[int, int], total: int, expected: dict[int, int]) -> None:
    assert water_fill(pending, total) == expected


# (table fence, queues, rows_max) -> takes as (queue, start, end, skipped), or None / Fenced
CASES = [
    # a new table: from each queue's first readable offset, up to its confirmed end
    ("new table", None, [q(0, None, 0, 5), q(1, None, 3, 4)], 100,
     [(0, 0, 5, 0), (1, 3, 4, 0)]),
    # the table holds 0..4 of queue 0: continue at 5
    ("continue", fence_version(2, 9), [q(0, 5, 0, 8), q(1, 4, 0, 4)], 100, [(0, 5, 8, 0)]),
    ("caught up: nothing", fence_version(2, 9), [q(0, 5, 0, 5)], 100, None),
    # messages gone from log and tier before the table got them: skipped, counted
    ("retention gap", fence_version(2, 1), [q(0, 3, 10, 12)], 100, [(0, 10, 12, 7)]),
    ("gap, nothing left", fence_version(2, 1), [q(0, 3, 10, 10)], 100, [(0, 10, 10, 7)]),
    ("rows_max splits", fence_version(2, 1), [q(0, 0, 0, 100), q(1, 0, 0, 100)], 10,
     [(0, 0, 5, 0), (1, 0, 5, 0)]),
]


@pytest.mark.parametrize(("name", "fence", "queues", "rows_max", "takes"), CASES,
                         ids=[case[0] for case in CASES])
def test_plan_same_epoch(name: str, fence: int | None, queues: list[QueueState],
                         rows_max: int, takes: list[tuple[int, int, int, int]] | None) -> None:
    plan = plan_commit(master_epoch=2, table_fence=fence, queues=queues, rows_max=rows_max)
    if takes is None:
        assert plan is None
        return
    assert isinstance(plan, CommitPlan)
    assert [(t.queue_id, t.start_offset, t.end_offset, t.skipped_count)
            for t in plan.takes] == takes
    assert plan.master_epoch == 2
    assert plan.sequence == (1 if fence is None else split_fence(fence)[1] + 1)


def test_a_table_ahead_of_the_store_in_any_queue_stops_every_queue() -> None:
    """A recreated topic: its queue 1 would otherwise append the new topic's rows after the
    old topic's in the same table."""
    plan = plan_commit(master_epoch=2, table_fence=fence_version(2, 1),
                       queues=[q(0, 9, 0, 4), q(1, 0, 0, 2)], rows_max=10)
    assert plan == Ahead((0,))
    # a new epoch too: it holds its fence back rather than commit next to a foreign table
    assert plan_commit(master_epoch=3, table_fence=fence_version(2, 1),
                       queues=[q(0, 9, 0, 4)], rows_max=10) == Ahead((0,))


def test_a_newer_epoch_commits_its_fence_even_with_nothing_to_copy() -> None:
    plan = plan_commit(master_epoch=3, table_fence=fence_version(2, 40),
                       queues=[q(0, 5, 0, 5)], rows_max=10)
    assert isinstance(plan, CommitPlan)
    assert plan.takes == ()
    assert split_fence(plan.fence) == (3, 1)  # the sequence restarts with the epoch
    assert transactions(plan, "b", {}) == [(fence_app_id("b"), fence_version(3, 1))]


def test_a_deposed_master_is_fenced() -> None:
    plan = plan_commit(master_epoch=2, table_fence=fence_version(3, 1),
                       queues=[q(0, 5, 0, 9)], rows_max=10)
    assert plan == Fenced(master_epoch=2, table_epoch=3)


def test_transactions_follow_what_was_read() -> None:
    plan = CommitPlan(4, 2, (QueueTake(0, 10, 20), QueueTake(1, 5, 9), QueueTake(2, 7, 7, 3),
                             QueueTake(3, 0, 4)))
    # queue 0 read fully, queue 1 cut short by the byte budget, queue 2 only skipped,
    # queue 3 read nothing (the budget ran out): its offset does not move
    assert transactions(plan, "b", {0: 10, 1: 2, 3: 0}) == [
        (fence_app_id("b"), fence_version(4, 2)),
        (queue_app_id("b", 0), 20), (queue_app_id("b", 1), 7), (queue_app_id("b", 2), 7)]


def test_transactions_refuse_more_rows_than_planned() -> None:
    plan = CommitPlan(1, 1, (QueueTake(0, 0, 3),))
    with pytest.raises(AssertionError):
        transactions(plan, "b", {0: 4})


def test_app_ids_name_the_replica_set_and_queue() -> None:
    assert queue_app_id("broker-a", 3) == "rocketha/broker-a/3"
    assert fence_app_id("broker-a") == "rocketha/broker-a"

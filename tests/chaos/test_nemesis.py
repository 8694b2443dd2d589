"""The fault schedule (tests/chaos/nemesis.py) and the partial-partition shapes
(tests/support/partitions.py), without hosts."""

from __future__ import annotations

import itertools

import pytest

from tests.chaos.nemesis import KINDS, OPT_IN_KINDS, schedule
from tests.chaos.planned import HANDOVER_VARIANTS, RESTART_VARIANTS
from tests.support.partitions import shape_cuts

NINE = [f"h{i}" for i in range(9)]  # 3 controllers + 2 sets of 3 brokers, as in a campaign


def _reach(names: list[str], cuts: list[tuple[str, str]]) -> dict[str, frozenset[str]]:
    blocked = {frozenset(pair) for pair in cuts}
    return {a: frozenset(b for b in names if b != a and frozenset((a, b)) not in blocked)
            for a in names}


def test_the_default_schedule_of_a_seed_is_unchanged() -> None:
    """Seeds in the README's campaign table replay their schedule: opt-in kinds must not
    shift the draws of the default kinds (the first plans of seed 101, as run)."""
    names = [plan.name for plan in itertools.islice(schedule(101, KINDS), 6)]
    assert names == ["0:loss:any", "1:link:controller-leader", "2:pause:controller-follower",
                     "3:corrupt:slave", "4:power:slave", "5:corrupt:slave"]
    assert [p.name for p in itertools.islice(schedule(7, KINDS), 50)] == \
        [p.name for p in itertools.islice(schedule(7, KINDS), 50)]
    assert "shape" in OPT_IN_KINDS and "shape" not in KINDS
    assert {"handover", "restart"} <= set(OPT_IN_KINDS) and not {"handover", "restart"} & set(KINDS)


def test_planned_operations_mix_with_crash_faults() -> None:
    """The campaign's menu `handover,restart,kill,pause,partition`: every kind comes up, the
    planned kinds draw only their own variants (a restart never targets a master: a master's
    stop is a handover), both replica sets are hit, and the seed replays the schedule."""
    kinds = ("handover", "restart", "kill", "pause", "partition")
    plans = list(itertools.islice(schedule(4001, kinds), 200))
    assert {plan.kind for plan in plans} == set(kinds)
    handovers = [plan for plan in plans if plan.kind == "handover"]
    restarts = [plan for plan in plans if plan.kind == "restart"]
    assert {plan.variant for plan in handovers} == set(HANDOVER_VARIANTS)
    assert {plan.variant for plan in restarts} == set(RESTART_VARIANTS) == {"slave", "controller"}
    assert {plan.replica_set for plan in handovers} == {0, 1}
    assert all(0.0 <= plan.draw < 1.0 and plan.hold_s >= 3.0 for plan in [*handovers, *restarts])
    assert [p.name for p in itertools.islice(schedule(4001, kinds), 200)] == \
        [p.name for p in plans]
    # the crash kinds in the mix draw the targets they always did
    assert {p.variant for p in plans if p.kind == "kill"} <= {
        "master", "slave", "controller-leader", "controller-follower"}


@pytest.mark.parametrize("draw", [0.0, 0.31, 0.77])
def test_bridge_joins_two_halves_through_one_host(draw: float) -> None:
    cuts = shape_cuts(NINE, "bridge", draw)
    reach = _reach(NINE, cuts)
    bridges = [name for name, seen in reach.items() if len(seen) == len(NINE) - 1]
    assert len(bridges) == 1
    rest = [name for name in NINE if name not in bridges]
    sides = {reach[name] | {name} for name in rest}
    assert len(sides) == 2  # two halves, each sees itself, its half and the bridge
    left, right = (side - set(bridges) for side in sides)
    assert not left & right and len(left) + len(right) == len(rest)
    assert len(cuts) == len(left) * len(right)
    assert shape_cuts(NINE, "bridge", draw) == cuts  # the draw replays it


@pytest.mark.parametrize("count", [5, 7, 9])
def test_ring_gives_every_host_its_own_majority(count: int) -> None:
    names = NINE[:count]
    reach = _reach(names, shape_cuts(names, "ring", 0.5))
    majority = count // 2 + 1
    # a majority with itself: exactly one where the others split evenly over both sides
    assert all(len(seen) + 1 >= majority for seen in reach.values())
    if (count // 2) % 2 == 0:
        assert all(len(seen) + 1 == majority for seen in reach.values())
    views = {seen | {name} for name, seen in reach.items()}
    assert len(views) == count  # no two hosts see the same majority
    assert all(b in reach[a] for a in names for b in reach[a])  # symmetric
    assert all(a in reach[b] for a in names for b in reach[a])


def test_an_unknown_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        shape_cuts(NINE, "star", 0.1)

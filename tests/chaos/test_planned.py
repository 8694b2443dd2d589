"""The planned-operation faults (tests/chaos/planned.py) without hosts: the outcome recorded for
a handover is this run's, never an earlier stop's; what a drain does (take a writable set out,
never the last, and put it back next time); the producers' rotation over the topic's writable
sets (tests/chaos/workload.py route_index); the add-set and drain kinds in the schedule."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, cast

from tests.chaos.history import History
from tests.chaos.nemesis import KINDS, OPT_IN_KINDS, Nemesis, schedule
from tests.chaos.planned import ADD_SETS_MAX, PlannedOperations, drain_step
from tests.chaos.workload import route_index

SERVING = "2026-12-02 06:26:13,521 INFO rocketha.broker: broker-a-0 serving on 198.18.0.3:1"
HANDED = ("2026-12-02 06:27:01,002 INFO ha.broker.main: handed over to broker 2 "
          "(198.18.0.4:2) at log position 4096")
FELL_BACK = ("2026-12-02 06:29:40,117 INFO ha.broker.main: no handover: the puts in flight "
             "or the slave's catch-up outlasted handoverTimeoutMs")


class _Logs:
    def __init__(self, lines: list[str]) -> None:
        self.text = "\n".join(lines)

    def log_tail(self, name: str, lines: int) -> str:
        return self.text


def _outcome(lines: list[str], tmp_path: Path) -> str:
    history = History(tmp_path / "history.jsonl")
    try:
        return PlannedOperations(cast(Any, _Logs(lines)), history)._handover_outcome("b")
    finally:
        history.close()


def test_the_handover_outcome_is_the_last_stops(tmp_path: Path) -> None:
    assert _outcome([SERVING, HANDED], tmp_path) == \
        "handed over to broker 2 (198.18.0.4:2) at log position 4096"
    assert _outcome([SERVING, HANDED, SERVING, FELL_BACK], tmp_path).startswith(
        "no handover: the puts in flight")
    # handed over on an earlier stop, then restarted: this stop logged nothing
    assert _outcome([SERVING, HANDED, SERVING], tmp_path) == "not logged"


def test_a_drain_takes_out_a_writable_set_and_never_the_last() -> None:
    sets = ["broker-a", "broker-b", "broker-c"]
    everyone = dict.fromkeys(sets, True)
    assert drain_step(sets, everyone, [], 0) == ("drain", "broker-a")
    assert drain_step(sets, everyone, [], 4) == ("drain", "broker-b")
    # broker-a read-only already (not by us): drawn among the others only
    assert drain_step(sets, {**everyone, "broker-a": False}, [], 0) == ("drain", "broker-b")
    assert drain_step(sets, {"broker-a": True, "broker-b": False}, [], 3) is None
    assert drain_step(sets, {}, [], 0) is None  # nothing known to take writes


def test_the_next_drain_puts_back_what_the_last_took_out() -> None:
    sets = ["broker-a", "broker-b"]
    assert drain_step(sets, {"broker-a": True, "broker-b": False}, ["broker-b"], 0) == \
        ("undrain", "broker-b")


def test_producers_rotate_over_the_topics_writable_sets_only() -> None:
    endpoints = ("h1:1", "h2:1", "h3:1")  # the controller's alive masters
    set_of_member = {"h1:1": "broker-a", "h2:1": "broker-b", "h3:1": "broker-c",
                     "h4:1": "broker-a"}
    chosen = [endpoints[route_index(endpoints, set_of_member, ("broker-a", "broker-c"),
                                    turn) % len(endpoints)] for turn in range(4)]
    assert chosen == ["h1:1", "h3:1", "h1:1", "h3:1"]
    # routes not known yet, or a writable set without an alive master: the plain rotation
    assert route_index((), {}, ("broker-a",), 7) == 7
    assert route_index(endpoints, set_of_member, ("broker-d",), 5) == 5
    assert route_index(endpoints, set_of_member, (), 5) == 5


def test_the_new_kinds_are_opt_in_and_drawn_with_their_variants() -> None:
    assert {"add-set", "drain"} <= set(OPT_IN_KINDS) and not {"add-set", "drain"} & set(KINDS)
    plans = list(itertools.islice(schedule(4002, ("add-set", "drain", "kill")), 60))
    assert {plan.kind for plan in plans} == {"add-set", "drain", "kill"}
    assert {plan.variant for plan in plans if plan.kind == "add-set"} == {"new"}
    assert {plan.variant for plan in plans if plan.kind == "drain"} == {"toggle"}
    # each kind has its injector (a kind's name with - as _)
    assert all(callable(getattr(Nemesis, "_" + kind.replace("-", "_"), None))
               for kind in (*KINDS, *OPT_IN_KINDS))
    assert ADD_SETS_MAX >= 1

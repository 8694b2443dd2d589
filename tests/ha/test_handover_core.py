"""The put gate and step order of a master's handover (ha/broker/handover_core.py).

Goal: no put is in flight or admitted when the sealed log end is read; held puts are never
admitted on the old master once it asked the controller, unless the controller refused for
certain; a missing or unclear answer keeps it sealed; the target is a SyncStateSet member
that acked the most. Method: drive the core step by step, as the shell would, and replay
every interleaving of a few puts with the handover steps.
"""

from __future__ import annotations

import itertools

import pytest

from ha.broker.handover_core import REFUSALS, Admit, HandoverCore, Phase, choose_target


def test_the_sealed_position_is_read_only_once_no_put_is_in_flight() -> None:
    core = HandoverCore()
    assert core.admit() is Admit.ADMIT  # a put in flight
    assert core.seal()
    assert not core.seal()  # a second request does nothing
    assert core.admit() is Admit.HOLD
    assert not core.sealed_at(90)  # the put may still write: not final
    core.put_done()
    assert core.sealed_at(100)
    assert core.sealed_log_position == 100
    assert not core.ready_to_ask(99)
    assert core.ready_to_ask(100)
    assert core.admit() is Admit.HOLD
    core.answered("OK", "127.0.0.1:2")
    assert (core.phase, core.new_master) == (Phase.HANDED_OVER, "127.0.0.1:2")
    assert core.admit() is Admit.REFUSE


def _asking() -> HandoverCore:
    core = HandoverCore()
    assert core.seal() and core.sealed_at(10) and core.ready_to_ask(10)
    return core


@pytest.mark.parametrize("status", sorted(REFUSALS))
def test_a_definite_refusal_reopens_the_gate(status: str) -> None:
    core = _asking()
    core.answered(status)
    assert core.phase is Phase.REOPENED
    assert core.admit() is Admit.ADMIT


@pytest.mark.parametrize("status", [None, "BUSY", "NOT_LEADER", "INTERNAL_ERROR", "WHAT"])
def test_an_unclear_answer_keeps_the_gate_sealed(status: str | None) -> None:
    """BUSY or a lost leader may hide an entry that commits later: puts taken again here
    could be acked without the successor."""
    core = _asking()
    core.answered(status)
    assert core.phase is Phase.UNKNOWN
    assert core.admit() is Admit.HOLD


def test_abort_before_asking_reopens_but_not_after() -> None:
    core = HandoverCore()
    core.seal()
    assert core.abort()
    assert core.admit() is Admit.ADMIT
    asked = _asking()
    assert not asked.abort()
    assert asked.phase is Phase.ASKING


STEPS = ("seal", "sealed_at", "ask", "answer")


def test_every_interleaving_keeps_the_sealed_end_final() -> None:
    """Three puts (admit, write one position, done) and the handover steps, interleaved
    every possible way: no put writes after the sealed end is read, and the position the
    target must hold covers every put admitted."""
    put_events = [(p, e) for p in range(3) for e in ("admit", "write")]
    for order in itertools.permutations(range(len(put_events) + len(STEPS)), len(STEPS)):
        if list(order) != sorted(order):
            continue  # the handover steps happen in their order
        core, log_end, admitted, sealed_end = HandoverCore(), 0, set(), None
        puts = iter(put_events)
        for slot in range(len(put_events) + len(STEPS)):
            if slot in order:
                step = STEPS[order.index(slot)]
                if step == "seal":
                    core.seal()
                elif step == "sealed_at" and core.sealed_at(log_end):
                    sealed_end = log_end
                elif step == "ask" and sealed_end is not None:
                    core.ready_to_ask(log_end)  # the target acked everything written
                elif step == "answer" and core.phase is Phase.ASKING:
                    core.answered("OK", "b")
                continue
            put, event = next(puts)
            if event == "admit" and core.admit() is Admit.ADMIT:
                admitted.add(put)
            elif event == "write" and put in admitted:
                assert sealed_end is None, "a put wrote after the sealed end was read"
                log_end += 1
                core.put_done()
        if sealed_end is not None:
            assert sealed_end == log_end == len(admitted)


def test_choose_target() -> None:
    acked = {1: 500, 2: 400, 3: 450, 4: 600}
    assert choose_target(acked, (1, 2, 3), master_broker_id=1) == 3
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, leaving=(3,)) == 2
    assert choose_target(acked, (1, 2), master_broker_id=1, leaving=(2,)) is None
    assert choose_target({2: 10, 3: 10}, (1, 2, 3), master_broker_id=1) == 2  # ties: lower id
    assert choose_target({}, (1, 2), master_broker_id=1) is None  # no link: not a target
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, named=2) == 2  # not the furthest
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, named=4) is None  # not in the set
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, named=1) is None  # the master
    assert choose_target({3: 9}, (1, 2, 3), master_broker_id=1, named=2) is None  # no link
    # the slave linked longest, not the furthest: a fresh one's take-over rebuilds a table
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, link_ids={2: 4, 3: 7}) == 2
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, link_ids={2: 4, 3: 7},
                         leaving=(2,)) == 3
    assert choose_target(acked, (1, 2, 3), master_broker_id=1, link_ids={2: 4, 3: 7},
                         named=3) == 3


def test_a_reopened_gate_may_seal_again_and_a_handed_over_one_rearms_on_a_new_role() -> None:
    """`elect` keeps the old master running: after a refusal it may try again, and after
    handing over its gate must admit the puts of a later term (its role's fence answers
    them meanwhile). While ASKING nothing rearms: the election may still commit."""
    core = _asking()
    assert not core.rearm()
    core.answered("INVALID_REPLICAS")
    assert core.seal() and core.phase is Phase.SEALING
    assert core.sealed_at(20) and core.ready_to_ask(20)
    core.answered("OK", "b")
    assert not core.seal()  # handed over: nothing to seal until a new role
    assert core.admit() is Admit.REFUSE
    assert core.rearm()
    assert (core.phase, core.sealed_log_position, core.new_master) == (Phase.SERVING, None, None)
    assert core.admit() is Admit.ADMIT
    core.put_done()
    unknown = _asking()
    unknown.answered(None)
    assert unknown.rearm() and unknown.admit() is Admit.ADMIT
    assert not HandoverCore().rearm()

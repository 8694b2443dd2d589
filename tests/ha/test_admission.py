"""The store's admission gate: a stopping broker closes its store under no request handler.

Goal: `close` refuses new entries at once, waits for the handlers inside to leave (however
long; or up to its timeout, reporting how many are still inside), and an entry refused never
ran its block. Method: threads entering the real gate, events ordering them.
"""

from __future__ import annotations

import threading

import pytest

from ha.broker.admission import Admission, ClosedError


def _hold_inside(gate: Admission) -> tuple[threading.Thread, threading.Event]:
    """A handler thread inside `gate` until the returned event is set."""
    inside, release = threading.Event(), threading.Event()

    def handler() -> None:
        with gate.entered():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=handler)
    worker.start()
    assert inside.wait(10)
    return worker, release


def test_close_waits_for_the_handlers_inside_and_refuses_new_ones() -> None:
    gate = Admission()
    worker, release = _hold_inside(gate)
    assert gate.inside == 1
    closed: list[int] = []
    closer = threading.Thread(target=lambda: closed.append(gate.close()))
    closer.start()
    closer.join(0.2)
    assert closer.is_alive() and gate.closed, "close waits while a handler is inside"
    ran = []
    with pytest.raises(ClosedError), gate.entered():
        ran.append(True)
    assert ran == [], "a refused entry never runs its block"
    release.set()
    closer.join(10)
    worker.join(10)
    assert closed == [0] and gate.inside == 0


def test_close_with_a_timeout_reports_who_is_still_inside() -> None:
    gate = Admission()
    worker, release = _hold_inside(gate)
    assert gate.close(timeout_s=0.05) == 1
    release.set()
    worker.join(10)
    assert gate.inside == 0 and gate.close(timeout_s=0) == 0


def test_a_handler_that_raises_still_leaves_the_gate() -> None:
    gate = Admission()
    with pytest.raises(ValueError), gate.entered():
        raise ValueError("the handler failed")
    assert gate.inside == 0 and gate.close(timeout_s=0) == 0

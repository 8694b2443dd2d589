"""Long polling waits for confirm moves (ha/broker/long_poll.py), with fakes for the read."""

from __future__ import annotations

import threading
import time

from ha.broker.long_poll import Arrivals, poll_until


def _reads(results: list[str]) -> tuple[list[float], object]:
    calls: list[float] = []

    def read() -> str:
        calls.append(time.monotonic())
        return results[min(len(calls) - 1, len(results) - 1)]
    return calls, read


def test_an_unconfirmed_record_does_not_make_it_spin() -> None:
    """Nothing confirmed during the wait: two reads (first and none after), not thousands
    (the loop used to re-read while a record was appended but not confirmed)."""
    calls, read = _reads(["waiting"])
    started = time.monotonic()
    result = poll_until(read, lambda r: r == "waiting", Arrivals(), started + 0.3)
    assert result == "waiting"
    assert len(calls) == 1
    assert time.monotonic() - started >= 0.29


def test_a_confirm_move_wakes_it_and_it_reads_again() -> None:
    arrivals = Arrivals()
    calls, read = _reads(["waiting", "found"])
    threading.Timer(0.05, arrivals.notify).start()
    started = time.monotonic()
    assert poll_until(read, lambda r: r == "waiting", arrivals, started + 5.0) == "found"
    assert len(calls) == 2 and time.monotonic() - started < 2.0


def test_a_move_between_the_read_and_the_wait_is_not_missed() -> None:
    arrivals = Arrivals()
    calls: list[int] = []

    def read() -> str:
        calls.append(1)
        if len(calls) == 1:
            arrivals.notify()  # the confirm moves right after this read saw nothing
            return "waiting"
        return "found"
    started = time.monotonic()
    assert poll_until(read, lambda r: r == "waiting", arrivals, started + 5.0) == "found"
    assert time.monotonic() - started < 1.0  # no full wait


def test_moves_that_bring_nothing_wait_again_until_the_deadline() -> None:
    arrivals = Arrivals()
    calls, read = _reads(["waiting"])
    stop = threading.Event()

    def mover() -> None:  # other queues' confirms keep moving
        while not stop.wait(0.05):
            arrivals.notify()
    thread = threading.Thread(target=mover)
    thread.start()
    try:
        started = time.monotonic()
        assert poll_until(read, lambda r: r == "waiting", arrivals, started + 0.5) == "waiting"
        assert 0.45 <= time.monotonic() - started < 2.0
        assert len(calls) <= 0.5 / 0.05 + 3  # one read per move, not a spin
    finally:
        stop.set()
        thread.join()

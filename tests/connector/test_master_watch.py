"""A put waiting on a replaced master is abandoned; one waiting on a live master is not.

Goal (issue 15, availability after a pause): an idempotent, controller-configured producer
gives up on a master the controller has replaced instead of waiting out its pause. Method: the
pure `replacement_of` over cluster_list replies, and `RoundTrips` with jobs that block on
events (no sockets, no sleeps beyond the check interval).
"""

from __future__ import annotations

import threading
import time

import pytest

from connector.client.master_watch import RoundTrips, replacement_of

CHECK_INTERVAL_S = 0.01
JOB_WAIT_S = 10.0  # a blocked job's upper bound: the test releases it long before


def _cluster_list(master: int | None, alive: list[int], members: tuple[int, ...] = (1, 2, 3)
                  ) -> dict:  # type: ignore[type-arg]
    return {"replica_sets": [
        {"replica": {"broker_name": "other", "master_broker_id": 1,
                     "master_address": "o:1", "brokers": [{"broker_id": 1,
                                                           "broker_address": "o:1"}]},
         "alive_broker_ids": [1]},
        {"replica": {"broker_name": "a", "master_broker_id": master,
                     "master_address": None if master is None else f"a:{master}",
                     "brokers": [{"broker_id": i, "broker_address": f"a:{i}"}
                                 for i in members]},
         "alive_broker_ids": alive}]}


def test_a_replacement_is_another_alive_master_of_the_same_set() -> None:
    assert replacement_of(_cluster_list(2, [1, 2, 3]), "a:1") == "a:2"
    assert replacement_of(_cluster_list(1, [2, 3]), "a:1") is None  # still master, not alive
    assert replacement_of(_cluster_list(2, [1, 3]), "a:1") is None  # elected one not alive
    assert replacement_of(_cluster_list(None, [1, 2, 3]), "a:1") is None  # no master yet
    assert replacement_of(_cluster_list(1, [1, 2, 3]), "a:1") is None
    assert replacement_of(_cluster_list(2, [1, 2, 3]), "z:9") is None  # not a known member
    assert replacement_of({}, "a:1") is None


def test_a_job_that_answers_in_time_is_never_checked() -> None:
    round_trips = RoundTrips(CHECK_INTERVAL_S, CHECK_INTERVAL_S)
    checks: list[int] = []
    try:
        for value in range(3):
            assert round_trips.run(lambda v=value: v * 2, lambda: checks.append(1),
                                   lambda _: None) == value * 2
        with pytest.raises(ValueError, match="boom"):
            round_trips.run(_raise_value_error, lambda: None, lambda _: None)
    finally:
        round_trips.close()
    assert len(checks) <= 3  # at most a check per run on a loaded machine, never a give-up


def _raise_value_error() -> int:
    raise ValueError("boom")


def test_a_waiting_job_is_kept_while_its_master_holds_and_abandoned_once_replaced() -> None:
    round_trips = RoundTrips(CHECK_INTERVAL_S, CHECK_INTERVAL_S)
    release = threading.Event()
    abandoned_done = threading.Event()
    checks = 0

    def still_wanted() -> str | None:
        nonlocal checks
        checks += 1
        return "replaced" if checks >= 3 else None

    def blocked() -> str:
        release.wait(JOB_WAIT_S)
        return "late reply from the old master"

    def on_abandon(future) -> None:  # type: ignore[no-untyped-def]
        assert future.result() == "late reply from the old master"
        abandoned_done.set()

    try:
        with pytest.raises(RoundTrips.Abandoned, match="replaced"):
            round_trips.run(blocked, still_wanted, on_abandon)
        assert checks == 3
        # The next put runs at once on a fresh worker, while the old one is still blocked.
        assert round_trips.run(lambda: "new master", lambda: None, lambda _: None) == \
            "new master"
        assert not abandoned_done.is_set()
        release.set()
        assert abandoned_done.wait(JOB_WAIT_S), "the abandoned job's stream is closed at its end"
    finally:
        release.set()
        round_trips.close()


def test_a_job_that_ends_while_checked_keeps_its_result() -> None:
    round_trips = RoundTrips(CHECK_INTERVAL_S, CHECK_INTERVAL_S)
    release = threading.Event()

    def still_wanted() -> str:
        release.set()  # the reply arrives while the controller is asked
        threading.Event().wait(0.05)
        return "replaced"

    try:
        assert round_trips.run(lambda: release.wait(JOB_WAIT_S) and "stored",
                               still_wanted, lambda _: None) == "stored"
    finally:
        release.set()
        round_trips.close()


def test_a_failing_check_means_keep_waiting_and_a_jobs_own_timeout_is_its_result() -> None:
    round_trips = RoundTrips(CHECK_INTERVAL_S, CHECK_INTERVAL_S)
    release = threading.Event()
    checks = 0

    def broken_check() -> str | None:
        nonlocal checks
        checks += 1
        if checks >= 3:
            release.set()
        raise AttributeError("a controller reply we cannot read")

    def timed_out() -> str:
        raise TimeoutError("the job's own socket timeout")

    try:
        assert round_trips.run(lambda: release.wait(JOB_WAIT_S) and "stored", broken_check,
                               lambda _: None) == "stored"
        assert checks >= 3
        with pytest.raises(TimeoutError, match="socket timeout"):
            round_trips.run(timed_out, lambda: None, lambda _: None)
    finally:
        release.set()
        round_trips.close()


def test_an_interrupted_wait_abandons_the_job_instead_of_leaving_it_on_the_worker() -> None:
    round_trips = RoundTrips(CHECK_INTERVAL_S, CHECK_INTERVAL_S)
    release = threading.Event()
    closed = threading.Event()

    def interrupt() -> str | None:
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            round_trips.run(lambda: release.wait(JOB_WAIT_S) and "late", interrupt,
                            lambda _: closed.set())
        # the next job runs on a fresh worker at once, not behind the blocked one
        assert round_trips.run(lambda: "next", lambda: None, lambda _: None) == "next"
        release.set()
        assert closed.wait(JOB_WAIT_S), "the interrupted job's stream is closed at its end"
    finally:
        release.set()
        round_trips.close()


def test_the_first_check_waits_for_check_after() -> None:
    round_trips = RoundTrips(0.3, CHECK_INTERVAL_S)
    asked: list[float] = []
    started = time.monotonic()
    release = threading.Event()

    def still_wanted() -> str | None:
        asked.append(time.monotonic() - started)
        release.set()
        return None

    try:
        round_trips.run(lambda: release.wait(JOB_WAIT_S) and "ok", still_wanted, lambda _: None)
    finally:
        release.set()
        round_trips.close()
    assert asked and asked[0] >= 0.3

"""Giving up on a master the controller has replaced, while a put waits on it.

Why: a put's reply comes back on a long-lived DoPut stream, and gRPC offers no timeout for one
reply shorter than the whole stream's deadline. A master that is paused (SIGSTOP, a long GC-like
stall) or cut off holds the put for as long as that lasts, although the controller may have
elected another master after controllerHeartbeatTimeoutMs: the producer would stand still for
the whole pause (issue 15: 6 s in the fault run), then get an error from the old master.

So a producer that is idempotent and configured with a controller runs each round trip on a
worker thread (`RoundTrips`) and, once the reply is `ClientConfig.master_check_after_ms` late
and then every `master_check_interval_ms`, asks the controller who masters the endpoint's
replica set (`replacement_of`). Once
the controller names another alive master, the put is abandoned where it waits and sent again
to the new master. The retry carries the same (producer id, sequence), so a batch the old master
had already replicated is answered as a duplicate, not stored twice; whatever the old master
answers later is never shown to the caller. A producer without idempotence keeps waiting: a
retry of a batch the old master may still store would be stored twice. A controller that does
not answer changes nothing (docs/design.md §5.6): the put goes on waiting for its master.

The abandoned worker stays blocked on the old stream until the old master answers or the
stream's deadline passes (2 x request_timeout_ms), then closes the stream and exits; the
producer starts a new worker for its next put.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["RoundTrips", "replacement_of"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


def replacement_of(cluster_list: Mapping[str, Any], endpoint: str) -> str | None:
    """The address of the alive master that replaced `endpoint` in its replica set, from a
    controller `cluster_list` reply; None while `endpoint` is its set's master, while the set
    has no alive master yet, or when no replica set has `endpoint` as a member."""
    for status in cluster_list.get("replica_sets", []):
        replica = status.get("replica", {})
        members = {str(member.get("broker_address")): member.get("broker_id")
                   for member in replica.get("brokers", [])}
        if endpoint not in members:
            continue
        master_address = replica.get("master_address")
        alive = set(status.get("alive_broker_ids", []))
        if (master_address and str(master_address) != endpoint
                and replica.get("master_broker_id") in alive):
            return str(master_address)
        return None
    return None


def _ask(still_wanted: Callable[[], str | None]) -> str | None:
    try:
        return still_wanted()
    except Exception:  # a controller reply we cannot read: keep waiting, as without one
        logger.warning("asking whether a put's master was replaced failed", exc_info=True)
        return None


class _Worker:
    """One daemon thread that runs the round trips given to it, one at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="rocketha-put", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((job, future))
        return future

    def stop(self) -> None:
        """Exit after the job at hand (if any)."""
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job())
            except Exception as err:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(err)


class RoundTrips:
    """Runs one producer's round trips on a worker thread so that the caller can stop waiting.

    `run(job, still_wanted)` returns the job's result, or raises what it raised; once it has
    waited `check_after_s`, and then every `check_interval_s`, it calls `still_wanted()`, and
    when that returns a reason (a string), it abandons the job: `on_abandon` is attached to
    the job's future (to close what the job holds once it ends), the worker is replaced, and
    `Abandoned` is raised with the reason. Anything else that ends the wait early (a
    KeyboardInterrupt) abandons the job the same way before it propagates, so a job is never
    left running on a worker that takes the next one. A `still_wanted` that raises counts as
    "keep waiting". Not thread-safe, like the Producer that owns it.

    Why wait `check_after_s` first: a put that waits on its quorum is normal (a lagging slave
    makes every put wait up to syncFlushTimeout), and no controller replaces a master sooner
    than its heartbeat timeout; asking at once would have every slow put of every producer
    call the controller several times a second."""

    class Abandoned(Exception):
        pass

    def __init__(self, check_after_s: float, check_interval_s: float) -> None:
        self._check_after_s = check_after_s
        self._check_interval_s = check_interval_s
        self._worker: _Worker | None = None

    def run(self, job: Callable[[], T], still_wanted: Callable[[], str | None],
            on_abandon: Callable[[Future[T]], None]) -> T:
        if self._worker is None:
            self._worker = _Worker()
        future = self._worker.submit(job)
        wait_s = self._check_after_s
        try:
            while True:
                try:
                    return future.result(timeout=wait_s)
                except TimeoutError:
                    if future.done():
                        raise  # the job's own TimeoutError
                    wait_s = self._check_interval_s
                    reason = _ask(still_wanted)
                    if reason is None:
                        continue
                # The job may have ended meanwhile; if so its result stands.
                if future.done():
                    return future.result()
                self._abandon(future, on_abandon)
                raise RoundTrips.Abandoned(reason)
        except BaseException:
            if not future.done():  # interrupted while waiting: never leave it on the worker
                self._abandon(future, on_abandon)
            raise

    def _abandon(self, future: Future[T], on_abandon: Callable[[Future[T]], None]) -> None:
        future.add_done_callback(on_abandon)
        if self._worker is not None:
            self._worker.stop()  # it exits once the abandoned job ends
            self._worker = None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

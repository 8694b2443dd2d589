"""The threads around ProducerCore: futures, the linger timer, round trips, buffer waits.

    caller ── send(): append under the lock ──► POLL_NOW: poll, hand the batches to the pool
                                            ├─► WAKE_TIMER: notify the timer thread
                                            └─► NOTHING: the lane's batch in flight polls
    timer thread: sleeps until core.next_wakeup_s() (a linger ending, a backoff passing)
    pool (max_in_flight threads): round trip (`run_batch`, blocking IO) ─► core.complete ─►
        futures resolved outside the lock ─► core.poll: the next batch runs on the same thread

`send(..., inline=True)` (what `Producer.send` uses) marks the lane urgent and, when the lane was
idle, runs the round trip on the caller's own thread: a synchronous send costs what it cost
before there was a pool (no hand-off between threads).

A future never cancels (SendFuture.cancel returns False): a message accepted is sent, and its
future gets exactly one result, the one the core derived from its batch's reply.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from connector.client.producer_core import (
    NOTHING,
    POLL_NOW,
    Batch,
    BufferFull,
    LaneKey,
    Message,
    ProducerCore,
    Resolution,
    SendResult,
    results_of,
)
from connector.errors import ProducerBufferFullError, ProducerClosedError
from connector.protocol import PutReply, RocketHAError

__all__ = ["AsyncSender", "SendFuture"]

_LOGGER = logging.getLogger("concurrent.futures")  # where Future logs a failing callback


# A batch of 1000 messages makes 1000 futures. concurrent.futures.Future.__init__ builds a
# threading.Condition (an RLock and bound methods) and two lists for each, the message was a
# second object and its SendResult a third: together most of send_async's cost, a good part of
# it in the garbage collector. So a SendFuture is also the message the core queues (body, key,
# tags, properties, size_bytes; its own `handle`), it builds its Condition and lists only when
# a thread needs them (result() on a pending future, add_done_callback, wait, as_completed: each
# goes through `_condition`, `_waiters` or `_done_callbacks`), and its SendResult only when it
# is asked for (`_result`, from its batch's reply and its row). `_settle_all` finishes, under
# _LAZY_CONDITIONS, every future nobody looked at without any Condition; a thread that looks
# later finds the state FINISHED. Relies on Future's documented-in-source attributes (_state,
# _result, _exception, _condition, _waiters, _done_callbacks), which
# tests/connector/test_async_sender.py exercises with the stdlib's helpers.
_LAZY_CONDITIONS = threading.Lock()
_PENDING, _FINISHED = "PENDING", "FINISHED"  # concurrent.futures._base's state names


class _ReplyRows:
    """The SendResults of a stored batch's rows, made when the first one is asked for."""

    __slots__ = ("_reply", "_results", "_rows")

    def __init__(self, reply: PutReply, rows: int) -> None:
        self._reply = reply
        self._rows = rows
        self._results: list[SendResult | BaseException] | None = None

    def get(self, row: int) -> SendResult | BaseException:
        results = self._results
        if results is None:
            results = self._results = results_of(self._reply, self._rows)
        return results[row]


class SendFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """A send's future, and the message it sends (see above): cheap to make, and it cannot
    be cancelled (the message may already be on the wire)."""

    _state = _PENDING
    _exception: BaseException | None = None
    _lazy_condition: threading.Condition | None = None
    _lazy_waiters: list[Any] | None = None
    _lazy_callbacks: list[Any] | None = None
    _rows: _ReplyRows | None = None  # the result is row `_row` of these, made when asked
    _row = 0
    _value: Any = None

    def __init__(self, body: bytes, key: str | None, tags: str | None,
                 properties: tuple[tuple[str, str], ...] | None, size_bytes: int) -> None:
        # not Future.__init__: no Condition, no lists until one is needed
        self.body = body
        self.key = key
        self.tags = tags
        self.properties = properties
        self.size_bytes = size_bytes

    @property
    def handle(self) -> SendFuture:  # what the core hands back: the future itself
        return self

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        condition = self._lazy_condition
        if condition is None:
            with _LAZY_CONDITIONS:
                condition = self._lazy_condition
                if condition is None:
                    condition = self._lazy_condition = threading.Condition()
        return condition

    @property
    def _waiters(self) -> list[Any]:  # (Future uses it under _condition)
        if self._lazy_waiters is None:
            self._lazy_waiters = []
        return self._lazy_waiters

    @property
    def _done_callbacks(self) -> list[Any]:  # (Future uses it under _condition)
        if self._lazy_callbacks is None:
            self._lazy_callbacks = []
        return self._lazy_callbacks

    @property
    def _result(self) -> Any:
        rows = self._rows
        if rows is not None:
            self._value = rows.get(self._row)
            self._rows = None
        return self._value

    @_result.setter
    def _result(self, value: Any) -> None:
        self._value = value

    def add_done_callback(self, fn: Callable[[Any], object]) -> None:
        """As Future's, without a Condition: a callback added while nobody waits on the
        future is kept under _LAZY_CONDITIONS and called by `_settle_all` (on the thread that
        settles the batch, as Future calls it), or now when the future is settled."""
        with _LAZY_CONDITIONS:
            if self._lazy_condition is None:
                if self._state != _FINISHED:
                    self._done_callbacks.append(fn)
                    return
                settled = True
            else:
                settled = False
        if not settled:  # a thread waits on it: Future's own path, under its Condition
            super().add_done_callback(fn)
            return
        _call_back(fn, self)

    def cancel(self) -> bool:
        return False

    def done(self) -> bool:  # FINISHED is final and nothing cancels: no lock needed
        return self._state == _FINISHED

    def result(self, timeout: float | None = None) -> Any:
        if self._state == _FINISHED:  # no Condition for a future already settled
            if self._exception is not None:
                try:
                    raise self._exception
                finally:
                    self = None  # noqa: PLW0642 - as Future.result: no cycle via the frame
            return self._result
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _FINISHED:
            return self._exception
        return super().exception(timeout)


def _call_back(fn: Callable[[Any], object], future: SendFuture) -> None:
    try:
        fn(future)
    except Exception:
        _LOGGER.exception("exception calling callback for %r", future)


def _settle_all(resolutions: list[Resolution]) -> None:
    """Give each future its result or error (see SendFuture); a stored batch's futures get
    their row of its reply, made into a SendResult when asked for. Callbacks added without
    a Condition are called once every future of `resolutions` is settled, in order."""
    looked_at = []
    called: list[Any] = []  # SendFutures (the core's Resolution says Message)
    with _LAZY_CONDITIONS:
        for futures, outcome in resolutions:
            rows = _ReplyRows(outcome, len(futures)) if isinstance(outcome, PutReply) else None
            for row, future in enumerate(futures):
                future.body = future.properties = None  # sent: the caller may hold futures
                if future._lazy_condition is not None:
                    looked_at.append((future, outcome if rows is None else rows.get(row)))
                    continue
                if getattr(future, "_lazy_callbacks", None):
                    called.append(future)
                if rows is not None:
                    future._rows = rows
                    future._row = row
                    future._state = _FINISHED
                elif isinstance(outcome, BaseException):
                    future._exception = outcome
                    future._state = _FINISHED
                else:
                    future._value = outcome
                    future._state = _FINISHED
    for future, result in looked_at:
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
    for future in called:  # (no other thread adds to them now: the future is FINISHED)
        for fn in future._done_callbacks:
            _call_back(fn, future)


RunBatch = Callable[[Batch], "PutReply | RocketHAError"]


class AsyncSender:
    """Thread-safe: any thread may send, flush or close."""

    def __init__(self, core: ProducerCore, run_batch: RunBatch, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._core = core
        self._run_batch = run_batch
        self._clock = clock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._closed = False
        self._blocked = 0  # senders waiting for buffer room
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=core.config.max_in_flight, thread_name_prefix="rocketha-send")
        self._timer: threading.Thread | None = None

    def send(self, lane: LaneKey, future: SendFuture, inline: bool = False
             ) -> SendFuture:
        """Queue `future`'s message (the future is the message); returns it."""
        core = self._core
        with self._lock:  # the condition's lock (a C-level `with`)
            if self._closed:
                raise ProducerClosedError("send on a closed Producer")
            now_s = self._clock()
            try:
                action = core.append(lane, future, now_s, urgent=inline)  # type: ignore[arg-type]
            except BufferFull:
                action = self._append_blocking(lane, future, inline)
            batches = core.poll(now_s) if action == POLL_NOW else ()
            if self._timer is None:  # retries' backoffs need it too, not only lingers
                self._ensure_timer()
            if action != NOTHING and not batches:
                self._cond.notify_all()
        if batches:
            mine = next((batch for batch in batches if batch.lane == lane), None) \
                if inline else None
            for batch in batches:
                if batch is not mine:
                    self._pool.submit(self._run_chain, batch)
            if mine is not None:
                self._run_chain(mine, chain=False)
        return future

    def _append_blocking(self, lane: LaneKey, message: Message, inline: bool) -> int:
        """Wait (holding the condition) up to max_block_ms for buffer room."""
        deadline_s = self._clock() + self._core.config.max_block_ms / 1000.0
        self._blocked += 1
        try:
            return self._wait_for_room(lane, message, inline, deadline_s)
        finally:
            self._blocked -= 1

    def _wait_for_room(self, lane: LaneKey, message: Message, inline: bool,
                       deadline_s: float) -> int:
        while True:
            remaining_s = deadline_s - self._clock()
            if remaining_s <= 0:
                raise ProducerBufferFullError(
                    f"send_async: {self._core.buffered_bytes} bytes wait for the broker "
                    f"(buffer_bytes {self._core.config.buffer_bytes}); no room within "
                    f"max_block_ms {self._core.config.max_block_ms}")
            self._cond.wait(remaining_s)
            if self._closed:
                raise ProducerClosedError("send on a closed Producer")
            try:
                return self._core.append(lane, message, self._clock(), urgent=inline)
            except BufferFull:
                continue

    def _run_chain(self, batch: Batch | None, *, chain: bool = True) -> None:
        """Round trips: `batch`, then (with `chain`) the next batch the core hands out."""
        while batch is not None:
            try:
                outcome = self._run_batch(batch)
            except BaseException as err:  # noqa: BLE001 - a bug below: its futures get it
                outcome = err  # type: ignore[assignment]
            with self._cond:
                if isinstance(outcome, (PutReply, RocketHAError)):
                    resolutions = self._core.complete(batch, outcome, self._clock())
                else:
                    resolutions = self._core.complete_with(batch, outcome)
                batches = self._core.poll(self._clock())
                if not resolutions or self._blocked:  # a backoff to wait for, or buffer room
                    self._cond.notify_all()  # (not on every reply: a woken timer costs the GIL)
            _resolve(resolutions)
            batch = None
            for index, ready in enumerate(batches):
                if index == 0 and chain:
                    batch = ready
                else:
                    self._pool.submit(self._run_chain, ready)

    def _ensure_timer(self) -> None:
        if self._timer is None:
            self._timer = threading.Thread(target=self._timer_loop, name="rocketha-linger",
                                           daemon=True)
            self._timer.start()

    def _timer_loop(self) -> None:
        core = self._core
        while True:
            with self._cond:
                if self._closed and core.pending_messages == 0:
                    return
                batches = core.poll(self._clock())
                if not batches:
                    wakeup_s = core.next_wakeup_s()
                    if wakeup_s is None or core.in_flight >= core.config.max_in_flight:
                        self._cond.wait(1.0)
                    else:
                        self._cond.wait(max(0.0, wakeup_s - self._clock()))
                    continue
            for batch in batches:
                self._pool.submit(self._run_chain, batch)

    def lane_has_keys(self, lane: LaneKey) -> bool:
        with self._lock:
            return self._core.lane_has_keys(lane)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send every pending message now and wait until each has its result; False when
        `timeout_s` passed first."""
        with self._cond:
            last = self._core.flush()
            batches = self._core.poll(self._clock())
            self._ensure_timer()
            self._cond.notify_all()
        for batch in batches:
            self._pool.submit(self._run_chain, batch)
        _, not_done = concurrent.futures.wait(last, timeout_s)
        return not not_done

    def close(self, timeout_s: float | None = None) -> None:
        """Refuse new sends, wait for the pending ones (up to `timeout_s`; those still
        unsent then get ProducerClosedError), stop the threads."""
        with self._cond:
            self._closed = True
        if not self.flush(timeout_s):
            with self._cond:
                resolutions = self._core.fail_pending(
                    ProducerClosedError("the Producer closed before this message was sent"))
            _resolve(resolutions)
        with self._cond:
            self._cond.notify_all()
        self._pool.shutdown(wait=timeout_s is None)


_resolve = _settle_all

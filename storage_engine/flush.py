"""Flush service: ASYNC_FLUSH timer and SYNC_FLUSH group commit (RocketMQ's FlushManager).

One thread. In SYNC_FLUSH mode a put calls `wait_flushed(end)`: it raises the requested
position and sleeps on a condition; the thread wakes, fdatasyncs once for every waiter that
arrived meanwhile (group commit), publishes the new flushed position and wakes them all. A waiter
whose deadline passes returns False (the store answers FLUSH_DISK_TIMEOUT). In ASYNC_FLUSH mode
the thread flushes every `flush_interval_ms`. In both modes it writes the checkpoint every
`checkpoint_interval_ms`.

Driven mode (`driven=True`, for the simulator): no thread; whoever drives the store decides when
a flush and a checkpoint happen (`flush_now`, `checkpoint_now`), and `wait_flushed` never
blocks (it answers whether the position is flushed already). The same fail-stop rules apply.

Fail-stop: a flush that raises (an fsync failed: storage_engine/files.py has already called the
fsync failure handler, which in a broker ends the process) is never retried. The service marks
itself failed, wakes every waiter with False (FLUSH_DISK_TIMEOUT, never PUT_OK), answers every
later wait with False and flushes nothing more; the flushed position never moves again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from storage_engine.errors import FsyncFailedError

__all__ = ["FlushService"]

logger = logging.getLogger(__name__)


class FlushService:
    def __init__(
        self,
        *,
        flush: Callable[[], int],
        checkpoint: Callable[[], None],
        group_commit: bool,
        flush_interval_ms: int,
        checkpoint_interval_ms: int,
        flushed_log_position: int,
        name: str,
        driven: bool = False,
    ) -> None:
        self._flush = flush
        self._checkpoint = checkpoint
        self._group_commit = group_commit
        self._flush_interval_s = flush_interval_ms / 1000.0
        self._checkpoint_interval_s = checkpoint_interval_ms / 1000.0
        self._condition = threading.Condition()
        self._requested = flushed_log_position
        self._flushed = flushed_log_position
        self._stopping = False
        self._flush_count = 0
        self._failed: BaseException | None = None  # fail-stop: set once, never cleared
        self.last_error: BaseException | None = None
        self._driven = driven
        self._thread = None if driven else threading.Thread(target=self._run, name=name,
                                                             daemon=True)

    @property
    def flushed_log_position(self) -> int:
        return self._flushed

    @property
    def failed(self) -> BaseException | None:
        """The flush failure that stopped this service (None: it runs)."""
        return self._failed

    @property
    def flush_count(self) -> int:
        return self._flush_count

    def start(self) -> None:
        if self._thread is not None:
            self._thread.start()

    def stop(self) -> None:
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join()

    def flush_now(self) -> bool:
        """Driven mode: one flush now (never after a failure); False when it failed."""
        assert self._driven
        if self._failed is not None or self._stopping:
            return False
        return self._flush_once()

    def checkpoint_now(self) -> bool:
        """Driven mode: write the checkpoint now; False when its fsync failed (fail-stop)."""
        assert self._driven
        if self._failed is not None or self._stopping:
            return False
        return self._checkpoint_once()

    def wait_flushed(self, log_position: int, timeout_ms: int) -> bool:
        """Block until bytes below `log_position` are fsynced; False when the deadline passed.
        Driven mode: never blocks (no thread would wake it)."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self._condition:
            if self._flushed >= log_position:
                return True
            if self._failed is not None or self._driven:
                return False
            if log_position > self._requested:
                self._requested = log_position
                self._condition.notify_all()
            while self._flushed < log_position:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping or self._failed is not None:
                    return False
                self._condition.wait(remaining)
            return True

    def _run(self) -> None:
        next_checkpoint = time.monotonic() + self._checkpoint_interval_s
        while True:  # the one loop of this thread; ends on stop()
            with self._condition:
                if self._stopping:
                    return
                if self._group_commit:
                    if self._requested <= self._flushed:
                        self._condition.wait(min(self._flush_interval_s, 0.2))
                else:
                    self._condition.wait(self._flush_interval_s)
                if self._stopping:
                    return
            if not self._flush_once():
                return  # fail-stop: never flush (or retry) again
            if time.monotonic() >= next_checkpoint:
                next_checkpoint = time.monotonic() + self._checkpoint_interval_s
                if not self._checkpoint_once():
                    return

    def _checkpoint_once(self) -> bool:
        """One checkpoint; False when its fsync failed (the service is then failed for good)."""
        try:
            self._checkpoint()
        except FsyncFailedError as err:  # fail-stop, as for a flush
            logger.critical("checkpoint fsync failed, flushing stops for good: %s", err)
            with self._condition:
                self.last_error = self._failed = err
                self._condition.notify_all()
            return False
        except Exception as err:  # noqa: BLE001 - thread boundary: report, keep flushing
            logger.error("checkpoint failed: %s", err)
            self.last_error = err
        return True

    def _flush_once(self) -> bool:
        """One flush; False when it failed (the service is then failed for good)."""
        try:
            flushed = self._flush()
        except Exception as err:  # noqa: BLE001 - thread boundary: fail-stop (module docstring)
            logger.critical("flush failed, flushing stops for good (fail-stop): %s", err)
            with self._condition:
                self.last_error = self._failed = err
                self._condition.notify_all()
            return False
        with self._condition:
            if flushed > self._flushed:
                self._flushed = flushed
                self._flush_count += 1
            self._condition.notify_all()
        return True

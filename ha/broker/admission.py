"""Which request handlers are inside the store, so a stopping broker closes it under none.

A stopping broker cannot wait for every Flight call to end: a producer's idle DoPut stream
ends only when its client closes it or at its deadline (2 x the client's requestTimeoutMs),
and a handler blocked reading that stream's next batch holds nothing of the store. So the
broker waits a grace for the calls to end, then closes the store anyway; handlers enter this
gate around every step that touches the store (a put, a read, an action), and `close` refuses
new entries and waits for those inside to leave. A batch that reaches a stream after that is
refused (never stored, never acknowledged), so closing loses no PUT_OK.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Admission", "ClosedError"]


class ClosedError(Exception):
    """The gate is closed: the broker is stopping."""


class Admission:
    """A count of handlers inside the store, and a one-way switch that stops new entries."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._inside = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inside(self) -> int:
        with self._condition:
            return self._inside

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Run the block inside the gate; raises ClosedError (before the block) once closed."""
        with self._condition:
            if self._closed:
                raise ClosedError("the broker is stopping")
            self._inside += 1
        try:
            yield
        finally:
            with self._condition:
                self._inside -= 1
                if self._inside == 0:
                    self._condition.notify_all()

    def close(self, timeout_s: float | None = None) -> int:
        """Refuse new entries and wait until none is inside (at most `timeout_s`, None: no
        bound); returns how many are still inside (0 unless the timeout passed)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._condition:
            self._closed = True
            while self._inside:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._condition.wait(remaining)
            return self._inside

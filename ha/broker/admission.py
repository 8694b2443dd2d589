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

__all__ = ["Admission", "ClosedError"]


class ClosedError(Exception):
    """The gate is closed: the broker is stopping."""


class Admission:
    """A count of handlers inside the store, and a one-way switch that stops new entries.

    `with gate.entered():` runs on every produce batch: a plain lock and no generator-based
    context manager keep it at a few hundred ns (contextlib's cost ~1.9 us)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._closed = False
        self._emptied = threading.Event()  # set once closed with none inside

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inside(self) -> int:
        with self._lock:
            return self._inside

    def entered(self) -> Admission:
        """The gate as a context manager: the block runs inside it; entering raises
        ClosedError (before the block) once closed."""
        return self

    def __enter__(self) -> None:
        with self._lock:
            if self._closed:
                raise ClosedError("the broker is stopping")
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._closed and not self._inside:
                self._emptied.set()

    def close(self, timeout_s: float | None = None) -> int:
        """Refuse new entries and wait until none is inside (at most `timeout_s`, None: no
        bound); returns how many are still inside (0 unless the timeout passed)."""
        with self._lock:
            self._closed = True
            if not self._inside:
                self._emptied.set()
        self._emptied.wait(timeout_s)
        return self.inside

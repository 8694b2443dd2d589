"""Long polling: a read that found nothing new waits for the confirm position to move.

Reads are bounded by the confirm position (docs/design.md §5.2), so "something to read" appears when
the confirm position moves, not when a record is appended: a put waiting for its slaves has
appended bytes nobody may read yet. `Arrivals` counts confirm moves (the store's confirm
listener calls `notify`); `poll_until` reads, and while the read is still waitable waits for
a move newer than the one it read after, so it never misses one that came between its read
and its wait and never loops without one (it used to spin on an appended but unconfirmed
record, re-reading as fast as it could until the deadline).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Arrivals", "poll_until"]

R = TypeVar("R")


class Arrivals:
    """A counter of confirm moves that readers can wait on."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._moves = 0

    @property
    def moves(self) -> int:
        with self._condition:
            return self._moves

    def notify(self) -> None:
        with self._condition:
            self._moves += 1
            self._condition.notify_all()

    def wait_after(self, seen: int, timeout_s: float) -> int:
        """Block until a move after `seen` (or the timeout); returns the moves counted."""
        with self._condition:
            if self._moves == seen and timeout_s > 0:
                self._condition.wait(timeout_s)
            return self._moves


def poll_until(read: Callable[[], R], waitable: Callable[[R], bool], arrivals: Arrivals,
               deadline: float) -> R:
    """`read()` until its result is not `waitable` or `deadline` (time.monotonic) passed,
    reading again only after a confirm move."""
    seen = arrivals.moves
    result = read()
    while waitable(result):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return result
        moved = arrivals.wait_after(seen, remaining)
        if moved == seen:
            return result  # the deadline passed without a move
        seen = moved
        result = read()
    return result

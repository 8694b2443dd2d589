"""Delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing Input",
2002: ddmin), over a list of items such as a failing run's fault ordinals.

`ddmin(items, test)` returns a 1-minimal sublist that still fails: removing any single item of
it makes the test pass (or the test's budget ended the search first: it raises, and the caller
keeps the smallest failing list it saw). It tries the list cut in n chunks, each chunk alone,
then each complement, and doubles n when neither fails, as in the paper.

One difference: `test(candidate)` returns None when the candidate passes, else the items that
still matter (a subset of the candidate; e.g. the faults that happened before the failure: a
run that fails earlier never reaches its later faults). The search goes on from those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["ddmin", "split"]

T = TypeVar("T")


def split(items: Sequence[T], count: int) -> list[list[T]]:
    """`items` cut into `count` chunks of (nearly) equal length, in order."""
    assert 1 <= count <= len(items), (count, len(items))
    bounds = [len(items) * k // count for k in range(count + 1)]
    return [list(items[bounds[k]:bounds[k + 1]]) for k in range(count)]


def ddmin(items: Sequence[T], test: Callable[[list[T]], list[T] | None]) -> list[T]:
    """A 1-minimal failing sublist of `items` (which must fail; not tested again)."""
    current, chunk_count = list(items), 2
    while len(current) >= 2:
        chunks = split(current, chunk_count)
        # each chunk alone, then (with more than 2 chunks) each complement
        candidates = [(chunk, 2) for chunk in chunks]
        if chunk_count > 2:
            candidates += [([item for j, chunk in enumerate(chunks) if j != i for item in chunk],
                            chunk_count - 1) for i in range(chunk_count)]
        for candidate, next_count in candidates:
            still = test(candidate)
            if still is not None:
                current, chunk_count = still, max(2, min(next_count, len(still)))
                break
        else:
            if chunk_count >= len(current):
                break  # every single item is needed
            chunk_count = min(2 * chunk_count, len(current))
    return current

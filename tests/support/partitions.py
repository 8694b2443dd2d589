"""Partial partitions (Jepsen's bridge and majorities ring) as the pairs of processes that
cannot reach each other: shared by the chaos nemesis (tests/chaos/nemesis.py, on test hosts)
and the cluster simulator (tests/sim/cluster_sim.py, `--partial`)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

__all__ = ["SHAPES", "shape_cuts"]

SHAPES = ("bridge", "ring")


def shape_cuts(names: Sequence[str], shape: str, draw: float) -> list[tuple[str, str]]:
    """The pairs of hosts that cannot reach each other in a `bridge` or `ring` partition of
    `names`, in an order shuffled by `draw` (deterministic)."""
    order = sorted(names)
    random.Random(draw).shuffle(order)
    if shape == "bridge":  # order[0] reaches everyone; the two halves of the rest do not meet
        rest = order[1:]
        half = len(rest) // 2
        return [(a, b) for a in rest[:half] for b in rest[half:]]
    if shape == "ring":  # each sees `reach` neighbours on either side: a majority with itself
        count = len(order)
        reach = (count // 2 + 1) // 2
        return [(order[i], order[j]) for i, j in itertools.combinations(range(count), 2)
                if min(j - i, count - (j - i)) > reach]
    raise ValueError(f"shape {shape!r}: one of {SHAPES}")

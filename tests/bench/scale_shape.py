"""How a cost grows with a size: the shape of one scale curve, from a fit on log-log axes.

Pure (no IO), so tests/test_bench_scale_shape.py checks it on made-up curves. A curve is the
points (x, y) of one measured cost y (latency, bytes, seconds) at sizes x (queues, producers,
replica sets, GiB). On log-log axes a power law y = a * x**k is a line of slope k, so the
least-squares slope k says how y grows:

    constant   y barely moves: its total growth over the curve is within GROWTH_NOISE_RATIO
               (a shared machine's noise) or k < SLOPE_CONSTANT_MAX
    log        grows, but slower than any fixed power: 0.1 <= k < 0.5 (log x, sqrt x...)
    linear     k in [0.5, 1.2): proportional to the size (an offset makes k < 1 at small x)
    worse      k >= 1.2: super-linear (x log x would read as linear; x**2 reads as worse)

Over a large fixed base (threads or memory at start) the total's slope under-reads a linear
growth: `classify_increment` names the shape of what the cost adds past its first point.

Names are approximate by design: five points on a noisy machine cannot tell log x from x**0.3;
the slope is reported beside the name so a reader can judge.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

__all__ = ["GROWTH_NOISE_RATIO", "SLOPE_CONSTANT_MAX", "SLOPE_LINEAR_MIN", "SLOPE_WORSE_MIN",
           "Shape", "classify", "classify_increment", "log_log_slope"]

GROWTH_NOISE_RATIO = 1.25  # y_last / y_first under this: flat within noise
SLOPE_CONSTANT_MAX = 0.1
SLOPE_LINEAR_MIN = 0.5
SLOPE_WORSE_MIN = 1.2
Y_FLOOR = 1e-9  # log_log_slope's guard: a zero cost still has a logarithm


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    name: str  # constant | log | linear | worse | unknown (fewer than 2 sizes with a cost)
    slope: float  # the log-log least-squares slope (0.0 when unknown)
    growth_ratio: float  # y at the largest size / y at the smallest

    def to_json(self) -> dict[str, object]:
        return {"shape": self.name, "log_log_slope": round(self.slope, 3),
                "growth_ratio": round(self.growth_ratio, 3)}


def log_log_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ln y over ln x; xs must be positive and not all equal."""
    assert len(xs) == len(ys) >= 2, "a slope needs two points"
    assert all(x > 0 for x in xs), "sizes are positive"
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, Y_FLOOR)) for y in ys]
    mean_x = sum(lx) / len(lx)
    mean_y = sum(ly) / len(ly)
    spread = sum((x - mean_x) ** 2 for x in lx)
    assert spread > 0, "sizes must differ"
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(lx, ly, strict=True)) / spread


def classify(xs: Sequence[float], ys: Sequence[float]) -> Shape:
    """The shape of y over x (points in any order; y must not be negative). A cost that is 0 at
    some sizes (no snapshot yet, no CPU in the window) is fitted over the sizes where it is not:
    a logarithm of 0 would read as any growth at all."""
    points = sorted(zip(xs, ys, strict=True))
    assert all(y >= 0 for _, y in points), "a cost is not negative"
    if points and all(y == 0 for _, y in points):
        return Shape("constant", 0.0, 1.0)
    points = [(x, y) for x, y in points if y > 0]
    if len({x for x, _ in points}) < 2:
        return Shape("unknown", 0.0, 1.0)
    growth = points[-1][1] / points[0][1]
    slope = log_log_slope([x for x, _ in points], [y for _, y in points])
    if growth < GROWTH_NOISE_RATIO or slope < SLOPE_CONSTANT_MAX:
        name = "constant"
    elif slope < SLOPE_LINEAR_MIN:
        name = "log"
    elif slope < SLOPE_WORSE_MIN:
        name = "linear"
    else:
        name = "worse"
    return Shape(name, slope, growth)


def classify_increment(xs: Sequence[float], ys: Sequence[float]) -> Shape:
    """The shape of what a cost adds past its smallest size: (x - x0, y - y0) over the other
    points. A large fixed base (a broker's 20 threads, its 120 MiB at start) flattens the
    log-log slope of the total, so 20 + 1.8 threads per producer reads as `log` in total and
    as `linear` here; a cost that did not grow past its first point is `constant`."""
    points = sorted(zip(xs, ys, strict=True))
    x0, y0 = points[0]
    rest = [(x - x0, y - y0) for x, y in points[1:] if x > x0]
    if rest and all(y <= 0 or y < y0 * (GROWTH_NOISE_RATIO - 1) for _, y in rest):
        return Shape("constant", 0.0, max(y for _, y in points) / y0 if y0 > 0 else 1.0)
    return classify([x for x, _ in rest], [max(0.0, y) for _, y in rest])

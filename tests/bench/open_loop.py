"""Open-loop load, free of coordinated omission: a constant-rate send schedule, and latency
buckets in the manner of HdrHistogram.

A closed-loop client (send, wait for the ack, send the next) sends less while the server is
slow, so the slow moments are under-sampled ("coordinated omission", Gil Tene): its p99 hides
the stalls. Here message i is due at `i / rate_per_s` seconds after the start whatever
happened before, and its latency is taken from that due time to its acknowledgement: a sender
that falls behind (a stall of the server, of the client, of the machine) charges the delay to
every message it made late, as the users who would have sent them would have seen it.

Pure (no clock, no IO): the driver passes the time in; tests/test_bench_open_loop.py checks
both classes on made-up times.

LatencyHistogram: log-linear buckets over microseconds, as HdrHistogram lays them out: each
power of two [2**e, 2**(e+1)) split into SUB_BUCKETS equal buckets, so a recorded value is
known to within 1 / SUB_BUCKETS of itself (3 %) from 1 us to hours in a few hundred buckets;
values under 1 us count as 1 us. Percentiles answer a bucket's upper bound (never under the
true value); the max is kept exactly.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["SUB_BUCKETS", "LatencyHistogram", "Schedule"]

SUB_BUCKETS = 32


@dataclasses.dataclass
class Schedule:
    """Message i is due at `i / rate_per_s` s after the start; `count` messages in all."""

    rate_per_s: float
    duration_s: float
    next_index: int = 0

    def __post_init__(self) -> None:
        assert self.rate_per_s > 0 and self.duration_s > 0, "a rate and a duration"

    @property
    def count(self) -> int:
        return max(1, math.floor(self.rate_per_s * self.duration_s))

    def due_s(self, index: int) -> float:
        return index / self.rate_per_s

    @property
    def done(self) -> bool:
        return self.next_index >= self.count

    def take_due(self, elapsed_s: float) -> range:
        """The indices due by `elapsed_s` (since the start) not taken before: all at once when
        the sender is late (each keeps its own due time)."""
        last = min(self.count, math.floor(elapsed_s * self.rate_per_s) + 1)
        taken = range(self.next_index, max(self.next_index, last))
        self.next_index = taken.stop
        return taken

    def wait_s(self, elapsed_s: float) -> float:
        """How long until the next message is due (0: due now; the end: nothing left)."""
        if self.done:
            return 0.0
        return max(0.0, self.due_s(self.next_index) - elapsed_s)


class LatencyHistogram:
    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max_us = 0.0

    @staticmethod
    def bucket(value_us: float) -> int:
        value = max(1.0, value_us)
        exponent = math.floor(math.log2(value))
        sub = min(SUB_BUCKETS - 1, int((value / 2 ** exponent - 1) * SUB_BUCKETS))
        return exponent * SUB_BUCKETS + sub

    @staticmethod
    def upper_us(bucket: int) -> float:
        exponent, sub = divmod(bucket, SUB_BUCKETS)
        return float(2 ** exponent * (1 + (sub + 1) / SUB_BUCKETS))

    def record(self, value_us: float) -> None:
        key = self.bucket(value_us)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.total += 1
        self.max_us = max(self.max_us, value_us)

    def percentile_us(self, fraction: float) -> float:
        """The smallest bucket bound at or above `fraction` of the values (the max for 1.0)."""
        assert self.total, "no values recorded"
        if fraction >= 1.0:
            return self.max_us
        rank = max(1, math.ceil(fraction * self.total))
        seen = 0
        for key in sorted(self.counts):
            seen += self.counts[key]
            if seen >= rank:
                return min(self.upper_us(key), self.max_us)
        return self.max_us

    def summary_ms(self) -> dict[str, float]:
        return {"count": self.total,
                **{name: round(self.percentile_us(q) / 1000, 3)
                   for name, q in (("p50_ms", 0.5), ("p99_ms", 0.99), ("p999_ms", 0.999))},
                "max_ms": round(self.max_us / 1000, 3)}

    def buckets(self) -> dict[str, int]:
        """Upper bound in us -> count, the non-empty buckets (the JSON's record of the run)."""
        return {f"{self.upper_us(key):.0f}": count for key, count in sorted(self.counts.items())}

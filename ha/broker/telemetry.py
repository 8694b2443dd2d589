"""Traffic counters the broker keeps for its metrics: the only bookkeeping on the put path.

Everything else `/metrics` shows (roles, epochs, positions, lag, tier backlog, consumer lag)
is read from state the broker already keeps, at scrape time (ha/broker/metrics.py). What no
other state holds (messages and bytes in and out per topic, put outcomes per status, produce
latency) is counted here with ONE lock acquisition per produce batch or consume batch, which
replaces the two `_count` calls the service made per batch before; never per message.

    put_done(topic, rows, size_bytes, status, elapsed_s)  per produce batch
    get_done(topic, rows, size_bytes)                     per consume batch
    snapshot() -> TrafficSnapshot                         per scrape (copies under the lock)

Latency buckets are those of RocketMQ's `rocketmq_rpc_latency` (milliseconds).
"""

from __future__ import annotations

import bisect
import dataclasses
import threading

__all__ = ["LATENCY_BUCKETS_MS", "TOPICS_TRACKED_MAX", "Traffic", "TrafficSnapshot"]

# RocketMQ 5's rpc latency view: 1, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 3000 ms (+Inf)
LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0)
TOPICS_TRACKED_MAX = 10_000  # beyond this, traffic of new topics is counted under "_other"
OTHER_TOPIC = "_other"


@dataclasses.dataclass(frozen=True, slots=True)
class TrafficSnapshot:
    messages_in: dict[str, int]  # topic -> messages stored by puts on this broker
    bytes_in: dict[str, int]  # topic -> Arrow bytes of those batches
    messages_out: dict[str, int]  # topic -> messages served to consumers
    bytes_out: dict[str, int]  # topic -> record bytes served
    put_batches: dict[str, int]  # put status -> produce batches answered with it
    latency_counts: tuple[int, ...]  # per LATENCY_BUCKETS_MS slot, last one is +Inf
    latency_sum_ms: float


class Traffic:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in: dict[str, list[int]] = {}  # topic -> [messages, bytes]
        self._out: dict[str, list[int]] = {}
        self._statuses: dict[str, int] = {}
        self._latency = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self._latency_sum_ms = 0.0

    def put_done(self, topic: str, rows: int, size_bytes: int, status: str, stored: bool,
                 elapsed_s: float) -> None:
        """One produce batch answered `status` after `elapsed_s` (stored: counts as in)."""
        elapsed_ms = elapsed_s * 1000.0
        slot = bisect.bisect_left(LATENCY_BUCKETS_MS, elapsed_ms)
        with self._lock:
            self._statuses[status] = self._statuses.get(status, 0) + 1
            self._latency[slot] += 1
            self._latency_sum_ms += elapsed_ms
            if stored:
                entry = self._entry(self._in, topic)
                entry[0] += rows
                entry[1] += size_bytes

    def get_done(self, topic: str, rows: int, size_bytes: int) -> None:
        """One consume batch of `rows` messages (`size_bytes` of records) was served."""
        with self._lock:
            entry = self._entry(self._out, topic)
            entry[0] += rows
            entry[1] += size_bytes

    @staticmethod
    def _entry(table: dict[str, list[int]], topic: str) -> list[int]:
        entry = table.get(topic)
        if entry is None:
            if len(table) >= TOPICS_TRACKED_MAX:
                topic = OTHER_TOPIC
                entry = table.get(topic)
            if entry is None:
                entry = table[topic] = [0, 0]
        return entry

    def snapshot(self) -> TrafficSnapshot:
        with self._lock:
            return TrafficSnapshot(
                {t: e[0] for t, e in self._in.items()}, {t: e[1] for t, e in self._in.items()},
                {t: e[0] for t, e in self._out.items()}, {t: e[1] for t, e in self._out.items()},
                dict(self._statuses), tuple(self._latency), self._latency_sum_ms)

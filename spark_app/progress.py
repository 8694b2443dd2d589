"""Progress lines for streaming pipelines: rows, lag and duration of each micro-batch.

PySpark's Python sources expose no custom source metrics, so lag is computed the one way the
engine allows: the source's `reportLatestOffset()` fills `latestOffset` in each progress
report, next to `endOffset`; both are JSON strings in rocketha's canonical layout
`{"<topic>": {"<brokerName>:<queueId>": next_queue_offset}}`. Lag = sum over queues of
(latest - end), with queues missing from `endOffset` counted from 0.

`watch` polls `query.recentProgress` (Spark keeps the last
`spark.sql.streaming.numRecentProgressUpdates` of them) between `awaitTermination(poll_s)` calls
and prints each new batch once; the clock is a parameter so the stop rules test without sleeps.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

logger = logging.getLogger(__name__)

__all__ = ["BatchProgress", "OffsetsBehindLatestListener", "lag_messages",
           "offsets_behind_latest", "summarize", "watch"]

POLL_INTERVAL_S = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class BatchProgress:
    """One finished micro-batch, as the pipelines print it."""

    batch_id: int
    rows: int
    duration_ms: int
    lag_messages: int | None  # None: the source reported no latest offset

    def line(self) -> str:
        lag = "?" if self.lag_messages is None else str(self.lag_messages)
        return (f"batch={self.batch_id} rows={self.rows} duration_ms={self.duration_ms} "
                f"lag={lag}")


def _queue_offsets(text: object) -> dict[tuple[str, str], int]:
    if text is None:
        return {}
    parsed = json.loads(text) if isinstance(text, str) else text
    if not isinstance(parsed, Mapping):
        return {}
    offsets: dict[tuple[str, str], int] = {}
    for topic, queues in parsed.items():
        if isinstance(queues, Mapping):
            for queue, next_offset in queues.items():
                offsets[(str(topic), str(queue))] = int(next_offset)
    return offsets


def lag_messages(end_offset: object, latest_offset: object) -> int | None:
    """Messages between a batch's end and the newest available, or None if unknown."""
    if latest_offset is None:
        return None
    end = _queue_offsets(end_offset)
    latest = _queue_offsets(latest_offset)
    return sum(max(0, newest - end.get(queue, 0)) for queue, newest in latest.items())


def offsets_behind_latest(end_offset: object, latest_offset: object) -> dict[str, str] | None:
    """Spark's Kafka source metrics for one source of one batch: per queue, the newest offset
    minus the batch's end, as `minOffsetsBehindLatest` / `maxOffsetsBehindLatest` /
    `avgOffsetsBehindLatest` (strings, as Spark reports them); None when unknown."""
    if latest_offset is None:
        return None
    end = _queue_offsets(end_offset)
    behind = [max(0, newest - end.get(queue, 0))
              for queue, newest in _queue_offsets(latest_offset).items()]
    if not behind:
        return None
    return {"minOffsetsBehindLatest": str(min(behind)),
            "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}


class OffsetsBehindLatestListener(StreamingQueryListener):
    """Publishes the Kafka source's offsets-behind-latest numbers for rocketha sources.

    PySpark's Python sources cannot report custom metrics (the progress `metrics` map stays
    empty), so this listener computes them from each progress's `endOffset` and
    `latestOffset` (which the source fills through reportLatestOffset):

        listener = OffsetsBehindLatestListener()
        spark.streams.addListener(listener)
        ...
        listener.latest(str(query.id))  # [{"batchId", "source", "minOffsetsBehindLatest", ...}]
        listener.history(str(query.id))  # the same for the last BATCHES_KEPT batches

    Each batch is also logged at INFO (logger `spark_app.progress`). At most QUERIES_KEPT
    queries are remembered (the oldest is forgotten first).
    """

    QUERIES_KEPT = 256
    BATCHES_KEPT = 100  # entries (one per source and batch) per query

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_query: dict[str, collections.deque[dict[str, Any]]] = {}

    def onQueryStarted(self, event: Any) -> None:  # Spark's names
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        found = []
        for index, source in enumerate(progress.get("sources", [])):
            try:
                metrics = offsets_behind_latest(source.get("endOffset"),
                                                source.get("latestOffset"))
            except (ValueError, TypeError):
                continue  # not rocketha's offset layout (another source of the query)
            if metrics is None:
                continue
            found.append({"batchId": progress.get("batchId"), "source": index, **metrics})
            logger.info("query %s batch %s source %d: %s", progress.get("id"),
                        progress.get("batchId"), index, metrics)
        if found:
            query_id = str(progress.get("id"))
            with self._lock:
                kept = self._by_query.pop(query_id, None) or collections.deque(
                    maxlen=self.BATCHES_KEPT)
                kept.extend(found)
                self._by_query[query_id] = kept  # re-inserted: the newest query is last
                while len(self._by_query) > self.QUERIES_KEPT:
                    del self._by_query[next(iter(self._by_query))]

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def latest(self, query_id: str) -> list[dict[str, Any]]:
        """The numbers of the query's last batch that had any (one entry per source)."""
        entries = self.history(query_id)
        return [e for e in entries if e["batchId"] == entries[-1]["batchId"]] if entries else []

    def history(self, query_id: str) -> list[dict[str, Any]]:
        """The query's entries of its last batches, oldest first."""
        with self._lock:
            return list(self._by_query.get(query_id, ()))


def summarize(progress: Mapping[str, Any]) -> BatchProgress:
    """A `StreamingQueryProgress` (as its JSON dict) -> BatchProgress over all its sources."""
    lags = [lag_messages(source.get("endOffset"), source.get("latestOffset"))
            for source in progress.get("sources", [])]
    known = [lag for lag in lags if lag is not None]
    durations = progress.get("durationMs") or {}
    return BatchProgress(
        batch_id=int(progress.get("batchId", -1)),
        rows=int(progress.get("numInputRows", 0)),
        duration_ms=int(durations.get("triggerExecution", 0)),
        lag_messages=sum(known) if known else None,
    )


def _batch_running(query: Any) -> bool:
    """Is a micro-batch with data in progress now (Spark's StreamingQuery.status)?"""
    status = getattr(query, "status", None) or {}
    return bool(status.get("isTriggerActive") and status.get("isDataAvailable"))


def watch(query: Any, *, timeout_s: float | None, idle_timeout_s: float | None = None,
          emit: Callable[[str], None] = print, poll_s: float = POLL_INTERVAL_S,
          clock: Callable[[], float] = time.monotonic) -> list[BatchProgress]:
    """Print each new batch of `query` until it terminates, `timeout_s` passes, or (after at
    least one row) no batch has brought rows for `idle_timeout_s` ("run until caught up").

    Returns every batch seen. Re-raises the query's exception if it failed."""
    seen: dict[int, BatchProgress] = {}
    started = clock()
    last_rows_at: float | None = None

    def drain() -> None:
        nonlocal last_rows_at
        for update in query.recentProgress:
            batch = summarize(json.loads(update.json) if hasattr(update, "json") else update)
            if batch.batch_id not in seen:
                seen[batch.batch_id] = batch
                emit(batch.line())
                if batch.rows:
                    last_rows_at = clock()

    while True:
        terminated = query.awaitTermination(poll_s)
        drain()
        now = clock()
        if terminated or (timeout_s is not None and now - started >= timeout_s):
            break
        if idle_timeout_s is not None and last_rows_at is not None \
                and now - last_rows_at >= idle_timeout_s:
            if _batch_running(query):
                continue  # a long batch with data is not idleness: stopping would cut it
            break
    return [seen[batch_id] for batch_id in sorted(seen)]

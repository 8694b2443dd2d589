"""How far a topic table is behind the log: messages and seconds behind the confirm position.

    lag_messages  sum over the topic's queues of (confirmed end - the table's end)
    lag_seconds   0 when the table holds every confirmed message, else now - the store time of
                  the oldest confirmed message it lacks (the first past a queue's table end)

The table's ends come from the writer's last pass (PassResult.ends: the per-queue app
transactions it read or wrote), so this reads only the store: its queue ends, and one
record per lagging queue for its store time. Called when `broker info` or a metrics scrape
asks, never on a put's path. A queue the table has no row of counts from its first
readable offset (what the first commit will take).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from storage_engine import GetStatus, MessageStore

__all__ = ["TableLag", "table_lag"]

ONE_RECORD_BYTES = 1  # get_messages returns at least one record whatever the byte budget


@dataclasses.dataclass(frozen=True, slots=True)
class TableLag:
    messages: int
    seconds: float
    oldest_missing_ms: int | None  # store time of the oldest confirmed message not in it


def table_lag(store: MessageStore, topic: str, ends: Mapping[int, int],
              queue_ids: Iterable[int], now_ms: int) -> TableLag:
    messages = 0
    oldest: int | None = None
    for queue_id in sorted(set(queue_ids) | set(ends)):
        first = ends.get(queue_id, store.min_queue_offset(topic, queue_id))
        behind = store.max_queue_offset(topic, queue_id) - first
        if behind <= 0:
            continue
        messages += behind
        got = store.get_messages(topic, queue_id, first, max_count=1,
                                 max_bytes=ONE_RECORD_BYTES)
        if got.status is GetStatus.FOUND and got.records:
            stored_ms = got.messages()[0].store_timestamp_ms
            oldest = stored_ms if oldest is None else min(oldest, stored_ms)
    seconds = 0.0 if oldest is None else max(0.0, (now_ms - oldest) / 1000.0)
    return TableLag(messages, seconds, oldest)

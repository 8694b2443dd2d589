"""IdempotenceFollower: a slave's idempotence table kept current pass by pass.

Goal: after any sequence of passes the table equals a full `rebuild_table` of the same log
(so a promoted slave answers retries exactly as a restarted master would), a pass reads only
what arrived since the last one, and a truncation of indexed records starts it over (a marker
of a cut batch must not make its retry look like a duplicate). Method: a real MessageStore in
a temporary directory, marked batches put directly, the two tables compared.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from connector.client import with_marker
from connector.protocol import PutIdempotence
from ha.broker.idempotence import IdempotenceConfig, IdempotenceFollower, marker_of, rebuild_table
from storage_engine import MessageBatch, MessageStore, StoreConfig

CONFIG = IdempotenceConfig(producers_max=100, window_messages=1000, window_ms=10**12)
NOW_MS = 2_000_000_000_000


def put_marked(store: MessageStore, producer: str, sequence: int, queue_id: int) -> int:
    batch = with_marker(pa.record_batch({"body": pa.array([b"a", b"b"], pa.binary())}),
                        PutIdempotence(producer, sequence))
    assert marker_of(batch) == PutIdempotence(producer, sequence)
    properties = [dict(row) if row else None for row in batch.column("properties").to_pylist()]
    result = store.put_messages(MessageBatch(
        topic="t", bodies=[b"a", b"b"], queue_ids=[queue_id, queue_id],
        properties=properties, born_timestamp_ms=1))
    assert result.status.name == "PUT_OK", result
    store.set_confirm_log_position(store.log_position_end)  # as replication would
    return result.log_position_end


def sequences(table: object, producers: list[str]) -> list[int | None]:
    return [table.last_sequence(p) for p in producers]  # type: ignore[attr-defined]


def test_passes_equal_a_full_rebuild_and_a_cut_starts_over(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "s", StoreConfig(), auto_confirm=False)
    try:
        follower = IdempotenceFollower(store, CONFIG)
        producers = ["p1", "p2", "p3"]
        for sequence in range(5):
            put_marked(store, "p1", sequence, 0)
            put_marked(store, "p2", sequence, 1)
        table = follower.catch_up(now_ms=NOW_MS)
        assert sequences(table, producers) == [4, 4, None]
        cut_at = store.log_position_end
        follower_reads_from = dict(follower._next)
        for sequence in range(5, 8):
            put_marked(store, "p1", sequence, 0)
        put_marked(store, "p3", 0, 1)
        table = follower.catch_up(now_ms=NOW_MS)
        assert follower_reads_from == {("t", 0): 10, ("t", 1): 10}  # the 2nd pass began there
        full = rebuild_table(store, CONFIG, now_ms=NOW_MS)
        assert sequences(table, producers) == sequences(full, producers) == [7, 4, 0]
        store._state.confirm = cut_at
        store.truncate_to(cut_at)  # a fork cut: p1's 5..7 and p3's 0 are gone
        table = follower.catch_up(now_ms=NOW_MS)
        assert sequences(table, producers) == [4, 4, None]
    finally:
        store.close()

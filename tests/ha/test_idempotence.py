"""Idempotent produce on the broker (ha/broker/idempotence.py).

Goal: a batch whose (producer_id, sequence) was stored is dropped, whatever arrives in between;
the window is bounded (least recently stored producer forgotten first); a table rebuilt from a
store's queue tails after reopening knows exactly the markers stored; concurrent attempts of
one producer store a batch once. Method: the pure table directly, the shell with a counting
store callable, and a real MessageStore in a temporary directory, reopened.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from connector.protocol import IDEMPOTENCE_PROPERTY, PutIdempotence, PutReply, status_for
from ha.broker.idempotence import (
    IdempotenceConfig,
    IdempotenceTable,
    IdempotentPuts,
    marker_of,
    rebuild_table,
)
from storage_engine import MessageBatch, MessageStore, StoreConfig

PROPS = pa.map_(pa.string(), pa.string())
CONFIG = StoreConfig(commit_log_segment_size_bytes=128 * 1024, message_size_max_bytes=8192,
                     consume_queue_segment_entries=50)


def key(producer: str, sequence: int) -> PutIdempotence:
    return PutIdempotence(producer, sequence)


def test_table_prefix_semantics_and_lru_window() -> None:
    table = IdempotenceTable(producers_max=2)
    assert not table.is_duplicate(key("a", 0))
    table.record(key("a", 0))
    table.record(key("a", 1))
    assert table.is_duplicate(key("a", 0)) and table.is_duplicate(key("a", 1))
    assert not table.is_duplicate(key("a", 2))
    table.record(key("b", 5))
    table.record(key("a", 2))  # a is now the most recent
    table.record(key("c", 0))  # evicts b, the least recently stored
    assert table.last_sequence("b") is None and len(table) == 2
    assert table.last_sequence("a") == 2 and table.last_sequence("c") == 0


def test_marker_parsing() -> None:
    assert PutIdempotence.from_marker("q.1.2/7") == key("q.1.2", 7)
    for bad in ("nosequence", "p/", "/3", "p/x", "p/-1"):
        assert PutIdempotence.from_marker(bad) is None
    batch = pa.record_batch({"body": pa.array([b"a", b"b"]), "properties": pa.array(
        [None, [(IDEMPOTENCE_PROPERTY, "p/3"), ("x", "y")]], PROPS)})
    assert marker_of(batch) == key("p", 3)
    assert marker_of(pa.record_batch({"body": pa.array([b"a"])})) is None


def batch_with(marker: str | None, rows: int = 3) -> pa.RecordBatch:
    properties = [None] * (rows - 1) + [None if marker is None else
                                        [(IDEMPOTENCE_PROPERTY, marker)]]
    return pa.record_batch({"body": pa.array([b"x"] * rows),
                            "properties": pa.array(properties, PROPS)})


def ok_reply() -> PutReply:
    return PutReply("PUT_OK", 0, [[0, 0, 3]], None, 0)


def test_shell_drops_stored_batches_and_keeps_failed_ones() -> None:
    puts = IdempotentPuts(IdempotenceTable(100))
    calls: list[int] = []

    def store(status: str = "PUT_OK"):  # type: ignore[no-untyped-def]
        def run() -> PutReply:
            calls.append(1)
            return PutReply(status, 0, [], None, -1)
        return run

    assert not puts.put(batch_with("p/0"), store()).duplicate
    assert puts.put(batch_with("p/0"), store()).duplicate
    assert puts.put(batch_with("p/1"), store("SERVICE_NOT_AVAILABLE")).status != "PUT_OK"
    assert not puts.put(batch_with("p/1"), store()).duplicate  # not stored before: retried
    assert not puts.put(batch_with(None), store()).duplicate  # no marker: always stored
    assert not puts.put(batch_with(None), store()).duplicate
    assert len(calls) == 5 and puts.duplicates_dropped == 1


def test_no_gap_check_so_a_producer_keeps_one_batch_in_flight_per_producer_id() -> None:
    """What the table tolerates, which the asynchronous producer relies on
    (connector/client/producer_core.py: one batch in flight per lane, a producer id per lane): it
    trusts the producer's stored batches to be a prefix of its sequence. A sequence that
    skips one (n refused, n + 1 stored) is stored without complaint, and the retry of n is
    then answered as a duplicate although n was never stored. Were a gap check (Kafka's
    OUT_OF_ORDER_SEQUENCE) added, the producer could pipeline a lane; this test says so."""
    puts = IdempotentPuts(IdempotenceTable(100))
    stored: list[str] = []

    def store(marker: str, status: str = "PUT_OK"):  # type: ignore[no-untyped-def]
        def run() -> PutReply:
            if status_for(status).stored:
                stored.append(marker)
            return PutReply(status, 0, [], None, -1)
        return run

    assert not puts.put(batch_with("p/0"), store("p/0")).duplicate
    refused = puts.put(batch_with("p/1"), store("p/1", "SERVICE_NOT_AVAILABLE"))
    assert not status_for(refused.status).stored
    assert not puts.put(batch_with("p/2"), store("p/2")).duplicate  # a gap: accepted
    retry = puts.put(batch_with("p/1"), store("p/1"))
    # answered as a duplicate although never stored; with no place of p/1 kept, at least not
    # as a PUT_OK at a made-up position (issue 43)
    assert retry.duplicate and retry.status == "DUPLICATE_POSITION_UNKNOWN"
    assert "p/1" not in stored


def test_concurrent_attempts_store_once() -> None:
    puts = IdempotentPuts(IdempotenceTable(100))
    stored: list[int] = []
    barrier = threading.Barrier(8)

    def attempt() -> None:
        barrier.wait()
        for sequence in range(20):
            puts.put(batch_with(f"task/{sequence}"),
                     lambda s=sequence: (stored.append(s), ok_reply())[1])

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(stored) == list(range(20))


@pytest.mark.parametrize("window_messages, window_ms, remembered", [
    (1000, 3_600_000, {"p1": 1, "p2": 0}),
    (2, 3_600_000, {"p2": 0}),
    (1000, -3_600_000, {}),  # every marker older than the window
])
def test_rebuild_from_queue_tails(tmp_path: Path, window_messages: int, window_ms: int,
                                  remembered: dict[str, int]) -> None:
    with MessageStore(tmp_path, CONFIG) as store:
        for queue_id, marker in ((0, "p1/0"), (1, "p1/1"), (0, None), (1, "p2/0")):
            properties = [None, None if marker is None else {IDEMPOTENCE_PROPERTY: marker}]
            assert store.put_messages(MessageBatch(
                topic="t", bodies=[b"a", b"b"], queue_ids=[queue_id] * 2,
                properties=properties)).status.stored
    with MessageStore(tmp_path, CONFIG) as store:
        config = IdempotenceConfig(window_messages=window_messages, window_ms=abs(window_ms))
        now_ms = int(time.time() * 1000) + (0 if window_ms > 0 else 2 * abs(window_ms))
        table = rebuild_table(store, config, now_ms=now_ms)
    assert {p: table.last_sequence(p) for p in ("p1", "p2") if table.last_sequence(p)
            is not None} == remembered


def test_duplicate_of_an_unconfirmed_batch_waits_for_its_quorum() -> None:
    """A batch stored with FLUSH_SLAVE_TIMEOUT, retried: nothing is written again, and the
    retry's answer is the quorum wait on the original bytes, not a blanket PUT_OK."""
    puts = IdempotentPuts(IdempotenceTable(100))
    settled: list[int] = []

    def settle(status: str):  # type: ignore[no-untyped-def]
        def run(end: int) -> str:
            settled.append(end)
            return status
        return run

    first = puts.put(batch_with("p/0"),
                     lambda: PutReply("FLUSH_SLAVE_TIMEOUT", 2, [[0, 0, 3]], None, 4096),
                     settle("PUT_OK"))
    assert (first.status, first.duplicate, settled) == ("FLUSH_SLAVE_TIMEOUT", False, [])
    still = puts.put(batch_with("p/0"), ok_reply, settle("FLUSH_SLAVE_TIMEOUT"))
    assert (still.status, still.duplicate) == ("FLUSH_SLAVE_TIMEOUT", True)
    done = puts.put(batch_with("p/0"), ok_reply, settle("PUT_OK"))
    assert (done.status, done.duplicate) == ("PUT_OK", True)
    assert settled == [4096, 4096]


def test_rebuild_reads_back_across_blocks(tmp_path: Path) -> None:
    count = 10_000  # more than one backwards block
    with MessageStore(tmp_path, CONFIG) as store:
        for first in range(0, count, 1000):
            properties: list[dict[str, str] | None] = [None] * 1000
            properties[-1] = {IDEMPOTENCE_PROPERTY: f"task{first // 1000}/0"}
            assert store.put_messages(MessageBatch(topic="t", bodies=[b"x"] * 1000,
                                                   queue_ids=[0] * 1000,
                                                   properties=properties)).status.stored
        now_ms = int(time.time() * 1000)
        full = rebuild_table(store, IdempotenceConfig(window_messages=count), now_ms=now_ms)
        short = rebuild_table(store, IdempotenceConfig(window_messages=500), now_ms=now_ms)
    assert len(full) == 10 and full.last_sequence("task0") == 0
    assert len(short) == 1 and short.last_sequence("task9") == 0

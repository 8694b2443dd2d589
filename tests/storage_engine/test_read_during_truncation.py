"""Reads that run into a truncation (storage_engine: segment.py, message_store.py; chaos
finding 8).

Goal: reads take no lock, and a fork truncation (a slave's handshake) zeroes the ConsumeQueue
entries it removes; a read in that window must never return what the zeroed entries name
(an entry (0, 0, 0) passes the confirm-position check and names a 0-byte "record": a deposed
master's offset log skipped three such records in seed 606, and a consumer reading from that
slave got records no decoder takes). Method: a real store in a tmp dir; the reads run from
inside the store's own truncation, at the fsync that follows the zeroing of the queue's
entries (the window seed 606 hit), and again after the zeroing but with the queue's end read
before it (a read that computed its window first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storage_engine import MessageBatch, MessageStore, decode_record
from tests.support.replica_stores import during_queue_zeroing
from tests.support.scripted_put import open_small_store

TOPIC = "orders"


def _store_with_a_tail(directory: Path) -> tuple[MessageStore, int]:
    """Three confirmed messages, then three past the confirm position (a forked tail)."""
    store = open_small_store(directory)
    for n in range(3):
        store.append(MessageBatch(topic=TOPIC, bodies=[b"kept %d" % n], queue_ids=[0]))
    fork = store.log_position_end
    store.set_confirm_log_position(fork)
    for n in range(3):
        store.append(MessageBatch(topic=TOPIC, bodies=[b"cut %d" % n], queue_ids=[0]))
    state = store._state  # the queue's entries in its file (a new queue's wait in memory)
    state.create_first_segments(list(state.unflushed_queues))
    return store, fork


def _read_everything(store: MessageStore) -> list[tuple[str, list[bytes]]]:
    result = store.get_messages(TOPIC, 0, 0, max_count=100, max_bytes=1 << 20)
    block = store.get_message_block(TOPIC, 0, 0, max_count=100, max_bytes=1 << 20)
    tail = store.get_messages(TOPIC, 0, 3, max_count=100, max_bytes=1 << 20)
    block_tail = store.get_message_block(TOPIC, 0, 3, max_count=100, max_bytes=1 << 20)
    return [("get_messages", list(result.records)),
            ("get_message_block", _split(block.data, block.sizes)),
            ("get_messages past the cut", list(tail.records)),
            ("get_message_block past the cut", [block_tail.data] * len(block_tail.sizes))]


def test_a_read_during_the_queue_trim_returns_only_real_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, fork = _store_with_a_tail(tmp_path / "store")
    try:
        seen: list[list[tuple[str, list[bytes]]]] = []
        fired = during_queue_zeroing(monkeypatch, TOPIC,
                                     lambda: seen.append(_read_everything(store)))
        store.truncate_to(fork)
        assert fired
        for name, records in seen[0]:
            if "past the cut" in name:
                assert records == [], name
            else:
                assert [store_body(record) for record in records] == \
                    [b"kept 0", b"kept 1", b"kept 2"], name
    finally:
        store.close()


@pytest.mark.parametrize("read", ["get_messages", "get_message_block"])
def test_a_read_whose_window_was_taken_before_the_zeroing_drops_what_was_zeroed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str) -> None:
    """The read took its window (the queue's end) before a truncation moved the end down and
    zeroed three entries, and reads the entries after: it checks the queue's end again after
    reading and returns only the entries still in it."""
    store, _ = _store_with_a_tail(tmp_path / "store")
    try:
        store.set_confirm_log_position(store.log_position_end)  # the tail visible too
        entries = store._queues[(TOPIC, 0)]._segments
        real_read = entries.read

        def read_after_a_trim(position: int, size: int) -> bytes | None:
            if size > 20:  # the read of the entries (the window is taken): trim first
                monkeypatch.setattr(entries, "read", real_read)
                segment = entries.segments[-1]
                segment.write_position -= 60  # what the truncation does first,
                segment.file.write_at(bytes(60), segment.write_position)  # then this
            return real_read(position, size)

        monkeypatch.setattr(entries, "read", read_after_a_trim)
        if read == "get_messages":
            result = store.get_messages(TOPIC, 0, 0, max_count=100, max_bytes=1 << 20)
            next_queue_offset, records = result.next_queue_offset, list(result.records)
        else:
            block = store.get_message_block(TOPIC, 0, 0, max_count=100, max_bytes=1 << 20)
            next_queue_offset, records = block.next_queue_offset, _split(block.data,
                                                                         block.sizes)
        assert [store_body(record) for record in records] == [b"kept 0", b"kept 1", b"kept 2"]
        assert next_queue_offset == 3
    finally:
        store.close()


def _split(data: bytes, sizes: Any) -> list[bytes]:
    pieces, at = [], 0
    for size in sizes:
        pieces.append(data[at:at + int(size)])
        at += int(size)
    return pieces


def store_body(record: bytes) -> bytes:
    return decode_record(record).body

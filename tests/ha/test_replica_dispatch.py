"""A slave's bulk dispatch (storage_engine/record_runs.py) indexes replicated bytes exactly as
the master indexed its own writes.

Method: hypothesis generates batches (several topics, equal and mixed body sizes, tags, keys,
properties, explicit queue ids) written to a master store with small segments (so BLANK ends
and segment rolls occur); the CommitLog is shipped to a replica store in random-size chunks that
cut records anywhere, with `dispatch_replicated` after each. Every ConsumeQueue must then hold
the same entries as the master's, and the replica's dispatch cursor must sit at the log's end.
Shipping one put at a time (a single acknowledged send: a handful of records) takes the plain
walk (`walk_few`) instead of numpy's; it must index alike, and agree with the bulk walk on any
bytes, also hostile ones (same counts, same stop, same CorruptRecordError).
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import CorruptRecordError, MessageBatch, MessageStore, StoreConfig
from storage_engine.record_format import encode_host, encode_properties, encode_record
from storage_engine.record_runs import _rows, walk_few, walk_records

STORE = StoreConfig(commit_log_segment_size_bytes=256 << 10, message_size_max_bytes=4096)

batch_strategy = st.builds(
    lambda topic, sizes, queue, tagged, keyed, with_props: (topic, sizes, queue, tagged, keyed,
                                                           with_props),
    st.sampled_from(["A", "Bb", "C_topic"]),
    st.one_of(st.lists(st.integers(0, 3000), min_size=1, max_size=40),
              st.tuples(st.integers(1, 200), st.integers(1, 300)).map(lambda t: [t[0]] * t[1])),
    st.one_of(st.none(), st.integers(0, 3)),
    st.booleans(), st.booleans(), st.booleans(),
)


def write(store: MessageStore, spec: tuple) -> None:
    topic, sizes, queue, tagged, keyed, with_props = spec
    count = len(sizes)
    queue_ids = [queue if queue is not None else index % 4 for index in range(count)]
    store.append(MessageBatch(
        topic=topic, bodies=[bytes([65 + index % 26]) * size for index, size in
                             enumerate(sizes)],
        queue_ids=queue_ids,
        tags=[f"t{index % 3}" if index % 2 else None for index in range(count)]
        if tagged else None,
        keys=[f"k{index}" for index in range(count)] if keyed else None,
        properties=[{"p": "v" * (index % 5)} for index in range(count)] if with_props else None,
    ))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(batch_strategy, min_size=1, max_size=12),
       st.lists(st.integers(1, 70_000), min_size=1, max_size=20))
def test_bulk_dispatch_matches_the_masters_index(batches: list, chunk_sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        with MessageStore(root / "m", STORE) as master, \
                MessageStore(root / "s", STORE, auto_confirm=False) as replica:
            for spec in batches:
                write(master, spec)
            end = master.log_position_end
            position, turn = 0, 0
            while position < end:
                data = master.read_log(position, min(chunk_sizes[turn % len(chunk_sizes)],
                                                     end - position))
                replica.append_replicated(position, data)
                replica.dispatch_replicated()
                position += len(data)
                turn += 1
            assert replica.dispatched_log_position == end
            assert sorted(replica.queues()) == sorted(master.queues())
            for topic, queue_id in master.queues():
                mine = master._state.consume_queue(topic, queue_id)
                theirs = replica._state.consume_queue(topic, queue_id)
                assert theirs.max_queue_offset == mine.max_queue_offset
                assert theirs.read_entries(0, mine.max_queue_offset) == \
                    mine.read_entries(0, mine.max_queue_offset)


def _same_index(master: MessageStore, replica: MessageStore) -> None:
    assert replica.dispatched_log_position == master.log_position_end
    assert sorted(replica.queues()) == sorted(master.queues())
    for topic, queue_id in master.queues():
        mine = master._state.consume_queue(topic, queue_id)
        theirs = replica._state.consume_queue(topic, queue_id)
        assert theirs.read_entries(0, mine.max_queue_offset) == \
            mine.read_entries(0, mine.max_queue_offset)


def test_one_put_at_a_time_indexes_as_the_master(tmp_path: Path) -> None:
    """What a slave sees under single sends: each put's bytes alone, dispatched at once (small
    segments: BLANK ends and rolls happen on this path too)."""
    with MessageStore(tmp_path / "m", STORE) as master, \
            MessageStore(tmp_path / "s", STORE, auto_confirm=False) as replica:
        for index in range(1500):
            spec = (("A", "Bb")[index % 2], [100 + index % 7] * (1 + index % 3),
                    None if index % 5 else index % 4, index % 2 == 0, index % 3 == 0,
                    index % 4 == 0)
            start = master.log_position_end
            write(master, spec)
            data = master.read_log(start, master.log_position_end - start)
            while data:  # (a segment roll: the put's bytes start the next segment)
                replica.append_replicated(start, data)
                start += len(data)
                data = master.read_log(start, master.log_position_end - start)
            replica.dispatch_replicated()
            assert replica.dispatched_log_position == master.log_position_end
        _same_index(master, replica)


def _records(sizes: list[int]) -> bytes:
    host = encode_host("127.0.0.1", 1)
    data = b""
    for size in sizes:
        data += encode_record(
            body=b"b" * size, topic_meta=b"\x01t", properties=encode_properties({}),
            queue_id=0, queue_offset=0, log_position=len(data), store_timestamp_ms=1,
            store_host=host, born_timestamp_ms=1, born_host=host)
    return data


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 200), max_size=12), st.booleans(), st.integers(0, 4000),
       st.binary(max_size=8), st.integers(0, 4000))
def test_walk_few_agrees_with_walk_records(sizes: list[int], blank: bool, at: int,
                                           garbage: bytes, cut: int) -> None:
    data = bytearray(_records(sizes) + (struct.pack(">iI", 8, 0xCBD43194) if blank else b""))
    data[at:at + len(garbage)] = garbage  # maybe a bad TOTALSIZE or magic code
    data = bytes(data[:max(len(data) - cut, 0)] if cut % 3 else data)
    try:
        bulk: tuple | None = walk_records(data, 0, len(data))
    except CorruptRecordError:
        bulk = None
    try:
        few = walk_few(data, 0, len(data), 8)
    except CorruptRecordError:
        assert bulk is None
        return
    if few is None:  # 8 records found: the bulk walk takes over
        assert bulk is None or len(bulk[0]) >= 8
        return
    assert bulk is not None
    positions, _sizes, stop, found_blank = bulk
    assert few == (len(positions), stop, found_blank)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(-40, 300), st.integers(-8, 60), st.integers(0, 40),
       st.integers(1, 12), st.booleans(), st.integers(0, 300))
def test_strided_rows_equal_the_gather(size: int, first: int, step: int, count: int,
                                       width: int, bend: bool, bent: int) -> None:
    """Rows at equal distances come from a strided view (record_runs._rows); they must be
    exactly the gather's rows, and rows the gather cannot take (outside the buffer) must fail
    as the gather fails, never read past the buffer."""
    raw = np.frombuffer(bytes(range(256)) * (size // 256 + 1), np.uint8)[:size]
    at = first + step * np.arange(count, dtype=np.int64)
    if bend and count > 2:
        at[count // 2] = bent  # no longer one distance apart: the gather
    try:
        expected = raw[at[:, None] + np.arange(width)]
    except IndexError:
        with pytest.raises(IndexError):
            _rows(raw, at, width)
        return
    assert np.array_equal(_rows(raw, at, width), expected)


def test_strided_rows_stop_at_the_buffers_end() -> None:
    raw = np.frombuffer(bytes(range(100)), np.uint8)[:90]  # more bytes lie behind the view
    at = np.arange(0, 90, 10, dtype=np.int64)
    assert np.array_equal(_rows(raw, at, 10), raw.reshape(9, 10))
    with pytest.raises(IndexError):
        _rows(raw, at, 11)  # the last row would take a byte past the view
    with pytest.raises(IndexError):
        _rows(raw, at + 1, 10)

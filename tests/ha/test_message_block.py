"""get_message_block returns exactly what get_messages returns, back to back in one buffer,
and the broker's vectorized decoder turns it into the same Arrow rows as the per-record one;
asked for some columns only, both decoders return exactly those columns of the full batch."""

from __future__ import annotations

import itertools
from pathlib import Path

from connector.protocol import CONSUME_SCHEMA
from ha.broker.arrow_codec import block_to_batch, empty_batch, records_to_batch
from storage_engine import GetStatus, MessageBatch, MessageStore, StoreConfig

CONFIG = StoreConfig(commit_log_segment_size_bytes=128 * 1024, message_size_max_bytes=8192,
                     consume_queue_segment_entries=50)


def test_block_equals_records_across_segments_and_interleaved_queues(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CONFIG) as store:
        for round_index in range(40):
            store.put_messages(MessageBatch(topic="topic", bodies=[b"x" * (round_index * 37)] * 7,
                                            queue_ids=[round_index % 2] * 7))
            store.put_messages(MessageBatch(
                topic="topic", bodies=[b"p", b""], queue_ids=[0, 0], tags=["A", None],
                keys=[None, "k"], properties=[{"n": str(round_index)}, None]))
            store.put_messages(MessageBatch(topic="other", bodies=[b"o"], queue_ids=[0]))
        for start, count, size in ((0, 4096, 1 << 30), (5, 17, 1 << 30), (0, 4096, 5000)):
            plain = store.get_messages("topic", 0, start, max_count=count, max_bytes=size)
            block = store.get_message_block("topic", 0, start, max_count=count, max_bytes=size)
            assert block.status is plain.status is GetStatus.FOUND
            assert block.next_queue_offset == plain.next_queue_offset
            assert block.data == b"".join(plain.records)
            assert list(block.sizes) == [len(record) for record in plain.records]
            expected = records_to_batch(list(plain.records), "topic")
            assert block_to_batch(block.data, block.sizes, "topic").equals(expected)
        end = store.max_queue_offset("topic", 0)
        assert store.get_message_block("topic", 0, end, max_count=1, max_bytes=1).status is \
            GetStatus.OFFSET_OVERFLOW_ONE


def test_same_size_records_take_the_2d_path_and_decode_equal(tmp_path: Path) -> None:
    """Equal record sizes decode by column slicing; equal record sizes with different body
    sizes (a longer key balancing a shorter body) must still split bodies correctly."""
    with MessageStore(tmp_path, CONFIG) as store:
        store.put_messages(MessageBatch(topic="topic", bodies=[b"%05d" % n for n in range(300)],
                                        queue_ids=[0] * 300))
        store.put_messages(MessageBatch(topic="topic", bodies=[b"aa", b"a", b"aa"],
                                        queue_ids=[1] * 3, keys=["k1", "k12", "k1"]))
        for queue_id, start, count in ((0, 0, 300), (0, 7, 50), (1, 0, 3)):
            plain = store.get_messages("topic", queue_id, start, max_count=count,
                                       max_bytes=1 << 30)
            block = store.get_message_block("topic", queue_id, start, max_count=count,
                                            max_bytes=1 << 30)
            assert len(set(block.sizes.tolist())) == 1  # every record the same size
            expected = records_to_batch(list(plain.records), "topic")
            decoded = block_to_batch(block.data, block.sizes, "topic")
            assert decoded.equals(expected)
            assert decoded.column("body").to_pylist() == [
                bytes(body) for body in expected.column("body").to_pylist()]


def test_byte_limit_cuts_between_records_but_returns_at_least_one(tmp_path: Path) -> None:
    with MessageStore(tmp_path, CONFIG) as store:
        store.put_messages(MessageBatch(topic="topic", bodies=[b"y" * 500] * 10,
                                        queue_ids=[0] * 10))
        record_size = int(store.get_message_block("topic", 0, 0, max_count=1,
                                                  max_bytes=1).sizes[0])
        assert record_size > 500
        block = store.get_message_block("topic", 0, 0, max_count=10,
                                        max_bytes=3 * record_size + record_size // 2)
        assert (len(block.sizes), block.next_queue_offset) == (3, 3)
        one = store.get_message_block("topic", 0, 4, max_count=10, max_bytes=1)
        assert (len(one.sizes), one.next_queue_offset) == (1, 5)


def test_column_subsets_are_the_full_batch_columns(tmp_path: Path) -> None:
    """Every subset of up to 3 columns (and a few larger ones), in any order asked, on the 2-D
    path (queue 0), the gather path and records with properties (queue 1), both decoders."""
    with MessageStore(tmp_path, CONFIG) as store:
        store.put_messages(MessageBatch(topic="topic", bodies=[b"%05d" % n for n in range(40)],
                                        queue_ids=[0] * 40))
        store.put_messages(MessageBatch(
            topic="topic", bodies=[b"p", b"", b"long body"], queue_ids=[1] * 3,
            tags=["A", None, "B"], keys=[None, "k", "k2"],
            properties=[{"n": "1"}, None, {"x": "y", "z": ""}]))
        names = CONSUME_SCHEMA.names
        subsets = [combo for size in (1, 2, 3) for combo in itertools.combinations(names, size)]
        subsets += [tuple(reversed(names)), ("msg_id", "tags", "body", "topic", "log_position")]
        for queue_id in (0, 1):
            plain = store.get_messages("topic", queue_id, 0, max_count=100, max_bytes=1 << 30)
            block = store.get_message_block("topic", queue_id, 0, max_count=100,
                                            max_bytes=1 << 30)
            full = records_to_batch(list(plain.records), "topic")
            for columns in subsets:
                expected = full.select([name for name in names if name in columns])
                assert block_to_batch(block.data, block.sizes, "topic", columns).equals(
                    expected), columns
                assert records_to_batch(list(plain.records), "topic", columns).equals(
                    expected), columns
        assert empty_batch(("body", "queue_id")).schema.names == ["queue_id", "body"]

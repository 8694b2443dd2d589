"""get_message_block returns exactly what get_messages returns, back to back in one buffer,
and the broker's vectorized decoder turns it into the same Arrow rows as the per-record one."""

from __future__ import annotations

from pathlib import Path

from ha.broker.arrow_codec import block_to_batch, records_to_batch
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
            assert block_to_batch(block.data, list(block.sizes), "topic").equals(expected)
        end = store.max_queue_offset("topic", 0)
        assert store.get_message_block("topic", 0, end, max_count=1, max_bytes=1).status is \
            GetStatus.OFFSET_OVERFLOW_ONE

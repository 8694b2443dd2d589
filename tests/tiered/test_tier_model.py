"""Goal: whatever the data shape (queue counts, body sizes, queues absent from segments) and
whatever order segments get tiered in, reading every queue through the store after local
retention returns exactly what was written, and the tier's offset ranges tile each queue.
Method: hypothesis draws batches and an upload order; a real store with small segments and a
file:// tier in a temp directory; uploads and retention driven directly (no threads)."""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import GetStatus, MessageBatch, MessageStore, StoreConfig
from storage_engine.tiered import TierService
from tests.tiered.test_uploader import TIERED

CONFIG = StoreConfig(commit_log_segment_size_bytes=72 * 1024, message_size_max_bytes=2048,
                     consume_queue_segment_entries=64, file_reserved_time_hours=0,
                     tiered=TIERED)

batches = st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.integers(0, 3),
                             st.lists(st.integers(0, 2048), min_size=1, max_size=40)),
                   min_size=1, max_size=40)


def _read_queue(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    bodies, cursor = [], 0
    for _ in range(10_000):
        block = store.get_message_block(topic, queue_id, cursor, max_count=23, max_bytes=9000)
        if block.status is GetStatus.OFFSET_TOO_SMALL:
            cursor = block.next_queue_offset
            continue
        if block.status is not GetStatus.FOUND:
            return bodies
        ends = np.cumsum(block.sizes).tolist()
        for start, end in zip([0, *ends[:-1]], ends, strict=True):
            bodies.append(block.data[start:end])
        cursor = block.next_queue_offset
    raise AssertionError("read did not finish")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, st.randoms(use_true_random=False))
def test_any_shape_any_upload_order_reads_back(shape: list, rng) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = MessageStore(Path(directory) / "store", CONFIG)
        try:
            for topic, queue_id, sizes in shape:
                bodies = [bytes([len(sizes) % 251]) * size for size in sizes]
                assert store.put_messages(MessageBatch(topic=topic, bodies=bodies,
                                                       queue_ids=[queue_id] * len(bodies))
                                          ).status.name == "PUT_OK"
            queues = store.queues()
            before = {key: _read_queue(store, *key) for key in queues}
            tier = TierService(store, TIERED, broker_name="b", writer="w")
            tier.attach()
            sealed = store.tier_segments()
            for base, size, _ in rng.sample(sealed, len(sealed)):  # any order
                tier.uploader.upload_segment(base, size)
                tier.reader.use(tier.manifests.load())
                tier.run_retention(int(time.time() * 1000) + 1000)
            while tier.run_retention(int(time.time() * 1000) + 1000)[0]:
                pass
            if sealed:  # every tiered segment is gone locally: all those reads are cold
                assert store.min_log_position == sealed[-1][0] + sealed[-1][1]
            manifest = tier.manifests.load()
            assert manifest.bases == sorted(base for base, _, _ in sealed)
            for key in queues:  # per queue, the objects' ranges tile [0, n) without overlap
                spans = sorted((q.first_queue_offset, q.end_queue_offset)
                               for s in manifest.segments for q in s.queues
                               if (q.topic, q.queue_id) == key)
                assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
                assert not spans or spans[0][0] == 0
            assert {key: _read_queue(store, *key) for key in queues} == before
        finally:
            store.close()

"""A slave's bulk dispatch (storage_engine/record_runs.py) indexes replicated bytes exactly as
the master indexed its own writes.

Method: hypothesis generates batches (several topics, equal and mixed body sizes, tags, keys,
properties, explicit queue ids) written to a master store with small segments (so BLANK ends
and segment rolls occur); the CommitLog is shipped to a replica store in random-size chunks that
cut records anywhere, with `dispatch_replicated` after each. Every ConsumeQueue must then hold
the same entries as the master's, and the replica's dispatch cursor must sit at the log's end.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_engine import MessageBatch, MessageStore, StoreConfig

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
            end = master.end_log_position
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
                mine = master._consume_queue(topic, queue_id)
                theirs = replica._consume_queue(topic, queue_id)
                assert theirs.max_queue_offset == mine.max_queue_offset
                assert theirs.read_entries(0, mine.max_queue_offset) == \
                    mine.read_entries(0, mine.max_queue_offset)

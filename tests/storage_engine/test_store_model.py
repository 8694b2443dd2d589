"""Model-based test: MessageStore against a dict of lists, with reopen and power loss.

Method: a hypothesis RuleBasedStateMachine drives puts (single and batched, several topics and
queues, tags and properties, segment rolls), reads with ranges and statuses, clean reopen, and
simulated power loss (storage_engine.testing, sometimes with a bit flipped in a CommitLog
segment's unsynced tail) + reopen. After a clean reopen the store equals the model. After a power
loss in ASYNC_FLUSH mode every queue holds a prefix of what the model had (in order, with the
same queue offsets, byte for byte: a flipped record is never served), and the model shrinks to
what survived; in SYNC_FLUSH mode every acknowledged put survives.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage_engine import (
    FlushDiskType,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutStatus,
    StoreConfig,
    TagFilter,
)
from storage_engine.testing import simulate_power_loss

TOPICS = ("alpha", "beta")
QUEUES = 3
TAGS = (None, "TagA", "TagB")


def config_for(flush: FlushDiskType) -> StoreConfig:
    return StoreConfig(commit_log_segment_size_bytes=96 * 1024, message_size_max_bytes=4096,
                       consume_queue_segment_entries=32, flush_disk_type=flush,
                       sync_flush_timeout_ms=5000)


class StoreModel(RuleBasedStateMachine):
    flush = FlushDiskType.ASYNC_FLUSH

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.config = config_for(self.flush)
        self.store = MessageStore(self.directory, self.config)
        self.model: dict[tuple[str, int], list[tuple[bytes, str | None]]] = {}
        self.rng = random.Random(0)

    def teardown(self) -> None:
        if not self.store._state.closed:
            self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    @rule(topic=st.sampled_from(TOPICS), queue_id=st.integers(0, QUEUES - 1),
          bodies=st.lists(st.binary(min_size=0, max_size=600), min_size=1, max_size=12),
          tag=st.sampled_from(TAGS), with_properties=st.booleans())
    def put(self, topic: str, queue_id: int, bodies: list[bytes], tag: str | None,
            with_properties: bool) -> None:
        count = len(bodies)
        result = self.store.put_messages(MessageBatch(
            topic=topic, bodies=bodies, queue_ids=[queue_id] * count,
            tags=[tag] * count if tag else None,
            properties=[{"n": str(i)} for i in range(count)] if with_properties else None,
        ))
        assert result.status is PutStatus.PUT_OK
        queue = self.model.setdefault((topic, queue_id), [])
        assert list(result.queue_offsets) == list(range(len(queue), len(queue) + count))
        queue.extend((body, tag) for body in bodies)

    @rule(topic=st.sampled_from(TOPICS), queue_id=st.integers(0, QUEUES - 1),
          start=st.integers(0, 60), count=st.integers(1, 30), tag=st.sampled_from(TAGS))
    def get(self, topic: str, queue_id: int, start: int, count: int, tag: str | None) -> None:
        queue = self.model.get((topic, queue_id))
        result = self.store.get_messages(topic, queue_id, start, max_count=count,
                                         max_bytes=1 << 20,
                                         tag_filter=TagFilter.parse(tag) if tag else None)
        if queue is None:
            assert result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
            return
        if not queue:
            assert result.status is GetStatus.NO_MESSAGE_IN_QUEUE
            return
        if start == len(queue):
            assert result.status is GetStatus.OFFSET_OVERFLOW_ONE
            return
        if start > len(queue):
            assert result.status is GetStatus.OFFSET_OVERFLOW_BADLY
            assert result.next_queue_offset == len(queue)
            return
        # max_count bounds the messages returned; filtered-out entries are skipped over.
        matching = [(offset, body) for offset, (body, tags) in enumerate(queue)
                    if offset >= start and (tag is None or tags == tag)]
        expected = matching[:count]
        got = [(m.queue_offset, m.body) for m in result.messages()]
        assert got == expected
        assert result.status is (GetStatus.FOUND if expected else GetStatus.NO_MATCHED_MESSAGE)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = MessageStore(self.directory, self.config)
        self.check_everything()

    @precondition(lambda self: self.flush is FlushDiskType.ASYNC_FLUSH)
    @rule(seed=st.integers(0, 1000), flip_bits=st.booleans())
    def power_loss_async(self, seed: int, flip_bits: bool) -> None:
        # a flipped bit in the unsynced tail: recovery cuts at that record, so what survives
        # is still a prefix, byte for byte (a served flipped record fails the comparison)
        simulate_power_loss(self.store, random.Random(seed), flip_bits=flip_bits)
        self.store = MessageStore(self.directory, self.config)
        for (topic, queue_id), queue in self.model.items():
            survivors = self.read_queue(topic, queue_id)
            assert survivors == [body for body, _ in queue][:len(survivors)]
            del queue[len(survivors):]
        # a queue none of whose entries reached a file (they wait in memory for the next
        # checkpoint to make it, ConsumeQueue defer_first_segment) is gone with them
        opened = set(self.store.queues())
        for key in [key for key, queue in self.model.items() if not queue and key not in opened]:
            del self.model[key]

    @precondition(lambda self: self.flush is FlushDiskType.SYNC_FLUSH)
    @rule(seed=st.integers(0, 1000), flip_bits=st.booleans())
    def power_loss_sync(self, seed: int, flip_bits: bool) -> None:
        simulate_power_loss(self.store, random.Random(seed), flip_bits=flip_bits)
        self.store = MessageStore(self.directory, self.config)
        self.check_everything()

    def read_queue(self, topic: str, queue_id: int) -> list[bytes]:
        bodies: list[bytes] = []
        queue_offset = 0
        for _ in range(10_000):
            result = self.store.get_messages(topic, queue_id, queue_offset, max_count=512,
                                             max_bytes=1 << 22)
            if result.status is not GetStatus.FOUND:
                break
            messages = result.messages()
            assert [m.queue_offset for m in messages] == list(
                range(queue_offset, queue_offset + len(messages)))
            bodies += [m.body for m in messages]
            queue_offset = result.next_queue_offset
        return bodies

    def check_everything(self) -> None:
        for (topic, queue_id), queue in self.model.items():
            assert self.read_queue(topic, queue_id) == [body for body, _ in queue]

    @invariant()
    def max_offsets_match(self) -> None:
        for (topic, queue_id), queue in self.model.items():
            assert self.store.max_queue_offset(topic, queue_id) == len(queue)


class SyncStoreModel(StoreModel):
    flush = FlushDiskType.SYNC_FLUSH


TestStoreModel = StoreModel.TestCase
TestStoreModel.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestSyncStoreModel = SyncStoreModel.TestCase
TestSyncStoreModel.settings = settings(max_examples=12, stateful_step_count=20, deadline=None)

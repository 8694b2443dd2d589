"""The state a MessageStore's parts share: one lock, the CommitLog, the ConsumeQueues and the
positions that tie them together.

    <storePathRootDir>/
        commitlog/<20-digit log_position>            segments of records (commit_log)
        consumequeue/<topic>/<queue_id>/<20-digit>   20-byte index entries (consume_queue)
        checkpoint  epochFileCheckpoint  lock  abort   (checkpoint, epoch)

Why one plain object rather than a base class: recovery (store_recovery), the put path
(store_writer), reads (store_reader), replication (replica_log) and tiering (tier_hooks) each
work on the same few fields under the same lock; holding them here lets each of those modules
say which fields it touches, and lets none of them see the others' methods.

The positions, in the order they may be apart (each at most the one before):

    commit_log.log_position_end >= dispatched >= confirm    (confirm <= end, always)

`dispatched`: ConsumeQueues index every complete record below it (the index is never ahead of
the log). `confirm`: reads never return a record past it. `put_end`: where the last whole put
among the indexed records ends (None: not known, found by a walk when needed; replica_log).

Checkpoints (store_recovery.write_checkpoint) are written by the flush thread and, under `lock`,
by a truncation or a reset (replica_log) and at open and close. Each takes a snapshot of the
positions under `lock` (numbered: `checkpoints_taken`), flushes outside it, then writes the file
under `checkpoint_lock`, and only if no later snapshot is on disk already (`checkpoints_written`):
a flush-thread snapshot from before a truncation never lands after the truncation's own. The
truncation target is carried here (`truncate_intent`) from before its intent checkpoint until
its cut is done, so every checkpoint written meanwhile keeps it (even after a cut that failed
without a crash: the store then refuses writes until a truncation finishes it).

Why not one lock held from the intent checkpoint through the final one: the flush thread would
take it before `lock` and a truncation after (it runs under `lock`, from dispatch_replicated
too), a deadlock; taking it first on every replication path would stall replication behind the
checkpoint's fsyncs.

Lock order: `lock` (if held) before `checkpoint_lock`, which is a leaf (nothing is taken
while it is held: it covers the checkpoint file's write alone).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from storage_engine.cold_tier import ColdTier
from storage_engine.commit_log import CommitLog, RecordRef
from storage_engine.config import FlushDiskType, StoreConfig
from storage_engine.consume_queue import CONSUME_QUEUE_ENTRY, ConsumeQueue
from storage_engine.epoch import EpochFile
from storage_engine.errors import FsyncFailedError, QueueOffsetsError, StorageError
from storage_engine.files import PendingDirectorySyncs
from storage_engine.fs import FileSystem
from storage_engine.names import queue_dir

__all__ = ["StoreState"]


class StoreState:
    """Mutable state of one open store; every field is guarded by `lock` unless noted."""

    __slots__ = (
        "auto_confirm", "checkpoint_lock", "checkpoints_taken", "checkpoints_written",
        "clock_ms", "closed", "commit_log", "config", "confirm", "confirm_listeners",
        "directory_syncs", "dispatched", "epochs", "fs", "fsync_failed", "lock",
        "next_queue_offsets", "put_end", "queues", "store_dir", "store_host", "sync_flush",
        "tier", "topic_meta", "truncate_intent", "unflushed_queues",
    )

    def __init__(self, store_dir: Path, config: StoreConfig, fs: FileSystem, *,
                 store_host: bytes, auto_confirm: bool, clock_ms: Callable[[], int]) -> None:
        self.store_dir = store_dir
        self.config = config
        self.fs = fs
        self.store_host = store_host
        self.auto_confirm = auto_confirm
        self.clock_ms = clock_ms
        self.sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.lock = threading.RLock()
        self.checkpoint_lock = threading.Lock()  # a leaf: `lock` is never taken inside it
        self.checkpoints_taken = 0  # snapshots numbered under `lock` (write_checkpoint)
        self.checkpoints_written = 0  # the newest on disk; guarded by `checkpoint_lock`
        self.truncate_intent = -1  # a cut not done yet (replica_log.truncate_to), or -1
        self.commit_log = CommitLog(store_dir / "commitlog", config.commit_log_segment_size_bytes,
                                    fs)
        self.epochs = EpochFile(store_dir / "epochFileCheckpoint", fs)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        # What a checkpoint must make durable before it vouches for the index (write_checkpoint):
        # the queues written since the last one, and the queues' new directories and files.
        self.unflushed_queues: set[ConsumeQueue] = set()
        self.directory_syncs = PendingDirectorySyncs(fs)
        self.next_queue_offsets: dict[str, dict[int, int]] = {}
        self.topic_meta: dict[str, bytes] = {}
        self.confirm_listeners: list[Callable[[int], None]] = []
        self.closed = False
        self.fsync_failed: FsyncFailedError | None = None  # set once: nothing flushes after
        self.tier: ColdTier | None = None  # set by attach_tier (storage_engine.tiered)
        self.confirm = 0  # the positions are set by recovery (store_recovery.recover)
        self.dispatched = 0
        self.put_end: int | None = None

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, opened (or created) on first use."""
        key = (topic, queue_id)
        queue = self.queues.get(key)
        if queue is None:  # the one place a queue's path is built: checked (names.py)
            directory = queue_dir(self.store_dir / "consumequeue", topic, queue_id)
            queue = ConsumeQueue(directory, topic, queue_id,
                                 self.config.consume_queue_segment_entries, self.fs,
                                 directory_syncs=self.directory_syncs,
                                 unflushed=self.unflushed_queues, defer_first_segment=True)
            self.queues[key] = queue
        return queue

    def create_first_segments(self, queues: Iterable[ConsumeQueue]) -> None:
        """Create the first segment file of each of `queues` whose entries wait in memory
        (ConsumeQueue `defer_first_segment`) and copy them there, without `lock`; under
        `lock` only the entries appended meanwhile are copied and the segment joins its
        queue. A checkpoint calls this before it flushes the queues it vouches for.

        Races: the file is made holding `directory_syncs.removing`, so a topic deleted
        meanwhile has its tree removed after the file is there, never before. A queue cut,
        reset or deleted meanwhile no longer waits for that file: it is closed, and unlinked
        unless the queue now in the table uses it (a stale empty segment must not stay: it
        would read as entries of zeros)."""
        for queue in queues:
            with self.directory_syncs.removing:
                prepared = queue.prepare_first_segment()
            if prepared is None:
                continue
            with self.lock:
                if queue.adopt_first_segment(prepared):
                    continue
                segment = prepared.segment
                segment.close()
                live = self.queues.get((queue.topic, queue.queue_id))
                if (live is None or not live.holds_segment_file(segment.path)) and (
                        self.fs.exists(segment.path)):  # (gone with its deleted topic's tree)
                    self.fs.remove(segment.path)

    def meta_for(self, topic: str) -> bytes:
        """TOPICLENGTH + TOPIC as a record stores them (cached per topic)."""
        meta = self.topic_meta.get(topic)
        if meta is None:
            raw = topic.encode("ascii")
            meta = self.topic_meta[topic] = bytes([len(raw)]) + raw
        return meta

    def check_writable(self) -> None:
        """Raise StorageError when the store is closed or stopped after a failed fsync."""
        if self.closed:
            raise StorageError("store is closed")
        if self.fsync_failed is not None:
            raise StorageError(f"stopped after a failed fsync: {self.fsync_failed}")
        if self.truncate_intent >= 0:
            raise StorageError(f"a truncation to log_position {self.truncate_intent} failed "
                               "half way; it must be redone first")

    @contextlib.contextmanager
    def fail_stop(self) -> Iterator[None]:
        """Latch any fsync failure below (a segment roll's directory fsync, a truncation, a
        checkpoint): from then on nothing flushes, checkpoints or appends (fsyncgate; in a
        broker the fsync failure handler has ended the process already)."""
        try:
            yield
        except FsyncFailedError as err:
            if self.fsync_failed is None:
                self.fsync_failed = err
            raise

    def raise_if_fsync_failed(self) -> None:
        """Fail-stop: a later fsync may "succeed" over pages the kernel has lost."""
        failed = self.fsync_failed
        if failed is not None:
            raise FsyncFailedError(failed.path, OSError(f"an earlier fsync failed: {failed}"))

    def notify_confirm(self, log_position: int) -> None:
        """Tell the listeners (outside the lock) that the confirm position advanced."""
        for listener in self.confirm_listeners:
            listener(log_position)

    def dispatch_refs(self, refs: Iterable[RecordRef]) -> int:
        """Write ConsumeQueue entries by parsing records (recovery and replication path)."""
        pending: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        pack = CONSUME_QUEUE_ENTRY.pack
        count = 0
        for ref in refs:
            key = (ref.topic, ref.queue_id)
            group = pending.get(key)
            if group is None:
                queue = self.consume_queue(ref.topic, ref.queue_id)
                expected = queue.max_queue_offset
                if ref.queue_offset < expected and expected == queue.min_queue_offset:
                    # An empty queue has nothing indexed: its remembered start came from a
                    # file whose first entries a crash lost (they read as a lead of empty
                    # entries), and the log says where the queue really starts.
                    queue.delete_all(next_queue_offset=ref.queue_offset)
                    expected = ref.queue_offset
                if ref.queue_offset < expected:
                    continue  # already indexed
                if ref.queue_offset > expected and queue.max_queue_offset > queue.min_queue_offset:
                    raise QueueOffsetsError(
                        f"consume queue {ref.topic}/{ref.queue_id} ends at {expected} but the "
                        f"record at log_position {ref.log_position} has queue_offset "
                        f"{ref.queue_offset}")
                group = pending[key] = (ref.queue_offset, [])
            elif ref.queue_offset != group[0] + len(group[1]):
                raise QueueOffsetsError(f"queue offsets of {key} are not contiguous at "
                                        f"log_position {ref.log_position}")
            group[1].append(pack(ref.log_position, ref.size_bytes, ref.tags_code))
            count += 1
        for (topic, queue_id), (first_offset, parts) in pending.items():
            self.consume_queue(topic, queue_id).append(first_offset, b"".join(parts))
            offsets = self.next_queue_offsets.setdefault(topic, {})
            offsets[queue_id] = first_offset + len(parts)
        return count

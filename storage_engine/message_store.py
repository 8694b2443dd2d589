"""MessageStore: CommitLog + ConsumeQueues + flush + checkpoint + epochs, in one directory.

The store is composed of parts that share one state object (store_state.py: the lock, the
CommitLog, the ConsumeQueues and the positions that tie them together; its docstring draws the
directory):

    recovery     store_recovery.py  on open: redo a cut-short truncation, scan and cut the
                                    CommitLog, trim and rebuild ConsumeQueues; the checkpoint
    writing      store_writer.py    the put path (`append`), flush and confirm bookkeeping
    reading      store_reader.py    by queue offset, as a block, by timestamp, queue bounds
    replication  replica_log.py     what ha/ uses: read_log, append_replicated +
                                    dispatch_replicated, truncate_to, reset_to, the cut count
    tiering      tier_hooks.py      cold reads below the local minimum, the uploader's view

This class owns them, the directory lock with its abort marker (a clean shutdown is
distinguishable from a crash) and the flush thread, and exposes one public surface. The put
and read paths cross one call per batch into their part, never one per message.

Durability: `put_messages` adds the SYNC_FLUSH wait (group commit) to `append`: a write is
acknowledged PUT_OK only once fsynced, else FLUSH_DISK_TIMEOUT after `sync_flush_timeout_ms`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from storage_engine.checkpoint import DirectoryLock
from storage_engine.cold_tier import ColdTier
from storage_engine.commit_log import RecoveryScan
from storage_engine.config import StoreConfig
from storage_engine.epoch import EpochFile
from storage_engine.files import fsync_directory, make_dirs_durable
from storage_engine.flush import FlushService
from storage_engine.fs import OS_FILE_SYSTEM, FileSystem
from storage_engine.messages import (
    GetResult,
    Message,
    MessageBatch,
    PutResult,
    RecordBlock,
    TagFilter,
)
from storage_engine.names import queue_dir
from storage_engine.record_format import encode_host
from storage_engine.replica_log import ReplicaLog
from storage_engine.statuses import PutStatus
from storage_engine.store_reader import StoreReader
from storage_engine.store_recovery import recover, write_checkpoint
from storage_engine.store_state import StoreState
from storage_engine.store_writer import StoreWriter
from storage_engine.tier_hooks import (
    read_queue_entries,
    tier_queue_ranges,
    tier_segments,
)

__all__ = ["MessageStore", "StoreStats"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStats:
    min_log_position: int
    log_position_end: int
    flushed_log_position: int
    confirm_log_position: int
    commit_log_segments: int
    queue_count: int
    flush_count: int
    recovered_after_crash: bool
    last_recovery: RecoveryScan | None
    # queues written since the checkpoint that last flushed them (a new queue's first file
    # is made by the next checkpoint): 0 once the flush thread has caught up
    unflushed_queue_count: int


class MessageStore:
    """An embedded message store over one directory. Thread-safe."""

    def __init__(
        self,
        store_dir: str | Path,
        config: StoreConfig,
        *,
        store_host: tuple[str, int] = ("127.0.0.1", 0),
        auto_confirm: bool = True,
        clock_ms: Callable[[], int] | None = None,
        fs: FileSystem = OS_FILE_SYSTEM,
        flush_driven: bool = False,
    ) -> None:
        """`fs`: the file layer (a simulated disk in tests/sim); `flush_driven`: no flush
        thread, the caller flushes and checkpoints (`flush_step`, `checkpoint_step`)."""
        self.store_dir = Path(store_dir)
        self.config = config
        make_dirs_durable(self.store_dir, fs)
        self._directory_lock = DirectoryLock(self.store_dir, fs)
        self._crashed = self._directory_lock.acquire()
        try:
            state = StoreState(self.store_dir, config, fs, store_host=encode_host(*store_host),
                               auto_confirm=auto_confirm,
                               clock_ms=clock_ms or (lambda: int(time.time() * 1000)))
            recovered = recover(state)
        except BaseException:
            self._directory_lock.release(clean=False)
            raise
        self._crashed = self._crashed or recovered.checkpoint_corrupt
        self.last_recovery: RecoveryScan | None = recovered.scan
        self._state = state
        self._commit_log = state.commit_log
        self._queues = state.queues
        self.epochs: EpochFile = state.epochs
        self._writer = StoreWriter(state)
        self._reader = StoreReader(state)
        self._replica = ReplicaLog(state)
        self._flush = FlushService(
            flush=self._writer.flush_commit_log, checkpoint=self._write_checkpoint,
            group_commit=state.sync_flush, flush_interval_ms=config.flush_interval_ms,
            checkpoint_interval_ms=config.checkpoint_interval_ms,
            flushed_log_position=state.commit_log.flushed_log_position,
            name=f"flush-{self.store_dir.name}", driven=flush_driven,
        )
        self._flush.start()

    @property
    def fs(self) -> FileSystem:
        """The file layer every part of the store uses (held in the shared state)."""
        return self._state.fs

    @fs.setter
    def fs(self, fs: FileSystem) -> None:
        self._state.fs = fs

    # -- writing (store_writer) -------------------------------------------------------------
    def put_message(self, message: Message) -> PutResult:
        return self.put_messages(message.as_batch())

    def put_messages(self, batch: MessageBatch) -> PutResult:
        """Append, then (SYNC_FLUSH) wait for the group commit. FLUSH_DISK_TIMEOUT means
        written but not known durable within `sync_flush_timeout_ms`."""
        result = self._writer.append(batch)
        if (result.status is PutStatus.PUT_OK and self._state.sync_flush
                and not self._flush.wait_flushed(result.log_position_end,
                                                 self.config.sync_flush_timeout_ms)):
            return dataclasses.replace(result, status=PutStatus.FLUSH_DISK_TIMEOUT)
        return result

    def append(self, batch: MessageBatch) -> PutResult:
        """Write a batch without waiting for durability (StoreWriter.append)."""
        return self._writer.append(batch)

    def wait_flushed(self, log_position: int, timeout_ms: int) -> bool:
        return self._flush.wait_flushed(log_position, timeout_ms)

    def flush_step(self) -> bool:
        """`flush_driven` stores: one group-commit flush now, as the flush thread would do
        it (publishes the flushed position; fail-stop on an fsync failure: False)."""
        return self._flush.flush_now()

    def checkpoint_step(self) -> bool:
        """`flush_driven` stores: write the checkpoint now; False when its fsync failed."""
        return self._flush.checkpoint_now()

    def flush(self) -> int:
        """fsync the CommitLog now; returns the flushed log position."""
        return self._writer.flush_commit_log()

    def _write_checkpoint(self) -> None:
        write_checkpoint(self._state)

    @property
    def confirm_log_position(self) -> int:
        return self._state.confirm

    def set_confirm_log_position(self, log_position: int) -> None:
        """Replication sets the commit point (StoreWriter.set_confirm_log_position)."""
        self._writer.set_confirm_log_position(log_position)

    def add_confirm_listener(self, listener: Callable[[int], None]) -> None:
        """Called (outside the store lock) whenever the confirm position advances."""
        self._state.confirm_listeners.append(listener)

    # -- reading (store_reader) -------------------------------------------------------------
    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        max_bytes: int,
        tag_filter: TagFilter | None = None,
    ) -> GetResult:
        """Up to `max_count` records (at least one if any is visible, then up to `max_bytes`)
        from `queue_offset`, never past the confirm position."""
        return self._reader.get_messages(topic, queue_id, queue_offset, max_count=max_count,
                                         max_bytes=max_bytes, tag_filter=tag_filter)

    def get_message_block(
        self, topic: str, queue_id: int, queue_offset: int, *, max_count: int, max_bytes: int
    ) -> RecordBlock:
        """Like get_messages without a tag filter, the records back to back in one buffer
        (StoreReader.get_message_block)."""
        return self._reader.get_message_block(topic, queue_id, queue_offset,
                                              max_count=max_count, max_bytes=max_bytes)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._reader.min_queue_offset(topic, queue_id)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue_offset a reader would wait for (only confirmed messages count)."""
        return self._reader.max_queue_offset(topic, queue_id)

    def queue_offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue_offset whose store timestamp is >= `timestamp_ms` (max when none)."""
        return self._reader.queue_offset_for_timestamp(topic, queue_id, timestamp_ms)

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._queues)

    # -- replication (replica_log) ----------------------------------------------------------
    @property
    def min_log_position(self) -> int:
        return self._commit_log.min_log_position

    @property
    def log_position_end(self) -> int:
        return self._commit_log.log_position_end

    @property
    def segment_size_bytes(self) -> int:
        return self._commit_log.segment_size_bytes

    @property
    def dispatched_log_position(self) -> int:
        """ConsumeQueues index every complete record below this position."""
        return self._state.dispatched

    @property
    def index_cuts(self) -> int:
        """Times a truncation or reset removed indexed records since open (ReplicaLog)."""
        return self._replica.index_cuts

    def read_log(self, log_position: int, size_bytes_max: int) -> bytes:
        """Raw CommitLog bytes from `log_position` (within one segment)."""
        return self._commit_log.read_raw(log_position, size_bytes_max)

    def append_replicated(self, log_position: int, data: bytes | memoryview) -> None:
        """Append the master's bytes at the same log positions (may end inside a record)."""
        self._replica.append_replicated(log_position, data)

    def dispatch_replicated(self) -> int:
        """Index the complete records appended since the last call; returns how many."""
        return self._replica.dispatch_replicated()

    def truncate_to(self, log_position: int) -> None:
        """Cut the log, its index and epochs at `log_position`, crash-safely (never below
        the confirm position: TruncateBelowConfirmError)."""
        self._replica.truncate_to(log_position)

    def lowest_cut_since(self, seen_cuts: int) -> int | None:
        """The lowest position cut since `index_cuts` was `seen_cuts` (None: no cut since)."""
        return self._replica.lowest_cut_since(seen_cuts)

    def truncate_incomplete_tail(self) -> None:
        """Cut what follows the complete data (`complete_log_position_end`)."""
        self._replica.truncate_incomplete_tail()

    def complete_log_position_end(self) -> int:
        """Where the data a take-over keeps ends (ReplicaLog.complete_log_position_end)."""
        return self._replica.complete_log_position_end()

    def cut_tail(self, log_position: int) -> None:
        """Cut a partial put or record from `log_position`, where the complete data ends."""
        self._replica.cut_tail(log_position)

    def reset_to(self, log_position: int) -> None:
        """Drop the whole log and restart it empty at `log_position` (a segment boundary)."""
        self._replica.reset_to(log_position)

    # -- tiering (tier_hooks) ---------------------------------------------------------------
    def attach_tier(self, tier: ColdTier | None) -> None:
        """Serve reads below the local minimum from `tier`; from now on retention deletes only
        segments the tier holds (verified uploads)."""
        self._state.tier = tier

    def tier_segments(self) -> list[tuple[int, int, float]]:
        """(base_log_position, size_bytes, mtime_s) of the sealed segments that may be
        uploaded (wholly below the confirm position)."""
        return tier_segments(self._state)

    def tier_queue_ranges(self, log_start: int, log_end: int) -> list[tuple[str, int, int, int]]:
        """(topic, queue_id, first_queue_offset, end_queue_offset) of each queue's records in
        [log_start, log_end), sorted."""
        return tier_queue_ranges(self._state, log_start, log_end)

    def read_queue_entries(self, topic: str, queue_id: int, queue_offset: int,
                           count: int) -> bytes:
        """Raw 20-byte ConsumeQueue entries from `queue_offset` (at most `count`)."""
        return read_queue_entries(self._state, topic, queue_id, queue_offset, count)

    # -- topics and retention ---------------------------------------------------------------
    def delete_topic(self, topic: str) -> int:
        """Drop a topic's ConsumeQueues (its records stay in the CommitLog until retention).
        Returns the number of queues removed. Raises InvalidNameError for a bad name.
        The removal is durable before this returns (the parent directory is fsynced: else a
        power cut undoes it and the deleted topic's queues come back, tests/sim)."""
        directory = queue_dir(self.store_dir / "consumequeue", topic)
        state = self._state
        with state.lock, state.fail_stop():
            keys = [key for key in self._queues if key[0] == topic]
            for key in keys:
                self._queues.pop(key).delete_all()
            state.next_queue_offsets.pop(topic, None)
            with state.directory_syncs.removing:  # no checkpoint fsyncs a directory going
                self.fs.remove_tree(directory)
            if self.fs.exists(directory.parent):
                fsync_directory(directory.parent, self.fs)
        return len(keys)

    def delete_expired(
        self, *, now_ms: int, floor_log_position: int, disk_used_ratio: float | None = None
    ) -> int:
        """Delete old whole segments (CommitLog, then the ConsumeQueue segments that point only
        into deleted data). A segment goes when it is older than `fileReservedTime`, or at any
        age while the disk is fuller than `diskMaxUsedSpaceRatio`; never when it holds data at
        or above `floor_log_position` or the confirm position, never the last one."""
        if disk_used_ratio is None:
            disk_used_ratio = self.fs.disk_used_ratio(self.store_dir)
        over_ratio = disk_used_ratio > self.config.disk_max_used_space_ratio
        reserved_ms = self.config.file_reserved_time_hours * 3_600_000
        deleted = 0
        state = self._state
        with state.lock:
            segments = self._commit_log.segments
            while deleted < self.config.delete_segments_per_pass_max and len(segments) > 1:
                first = segments[0]
                end = first.base_position + first.size_bytes
                if end > floor_log_position or end > state.confirm:
                    break
                if state.tier is not None and not state.tier.holds_segment(
                        first.base_position, end):
                    break  # tiering on: only verified tiered segments may go
                age_ms = now_ms - self.fs.mtime_s(first.path) * 1000
                if age_ms < reserved_ms and not over_ratio:
                    break
                self._commit_log.delete_first_segment()
                deleted += 1
            if deleted:
                log_min = self._commit_log.min_log_position
                for queue in self._queues.values():
                    queue.delete_segments_before_log_position(log_min)
                self.epochs.truncate_before(log_min)
                logger.info("retention deleted %d segment(s); log now starts at %d",
                            deleted, log_min)
        return deleted

    # -- lifecycle --------------------------------------------------------------------------
    def stats(self) -> StoreStats:
        return StoreStats(
            min_log_position=self._commit_log.min_log_position,
            log_position_end=self._commit_log.log_position_end,
            flushed_log_position=self._commit_log.flushed_log_position,
            confirm_log_position=self._state.confirm,
            commit_log_segments=len(self._commit_log.segments),
            queue_count=len(self._queues),
            flush_count=self._flush.flush_count,
            recovered_after_crash=self._crashed,
            last_recovery=self.last_recovery,
            unflushed_queue_count=len(self._state.unflushed_queues),
        )

    def close(self) -> None:
        """Clean shutdown: flush everything, write a clean checkpoint, drop the abort marker."""
        state = self._state
        with state.lock:
            if state.closed:
                return
            state.closed = True
        self._flush.stop()
        if state.fsync_failed is not None or self._flush.failed is not None:
            self._release(clean=False)  # no clean checkpoint over lost pages: recover on open
            return
        write_checkpoint(state, clean=True)
        self._release(clean=True)

    def _release(self, *, clean: bool) -> None:
        self._commit_log._segments.close()
        for queue in self._queues.values():
            queue.close()
        self._directory_lock.release(clean=clean)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

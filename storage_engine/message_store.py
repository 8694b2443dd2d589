"""MessageStore: CommitLog + ConsumeQueues + flush + checkpoint + epochs, in one directory.

    <storePathRootDir>/
        commitlog/<20-digit log_position>            segments of records (commit_log)
        consumequeue/<topic>/<queue_id>/<20-digit>   20-byte index entries (consume_queue)
        checkpoint  epochFileCheckpoint  lock  abort   (checkpoint, epoch)

Write path: `append` validates the whole batch (nothing is written when any message is bad),
then under one lock assigns queue offsets, encodes and writes the records, and dispatches their
ConsumeQueue entries right after the CommitLog bytes (the index is never ahead of the log).
`put_messages` adds the durability wait of SYNC_FLUSH (group commit). Replication (ha/) builds on
`append`, `read_log`, `append_replicated` + `dispatch_replicated`, `truncate_to`, `reset_to` and
the confirm position; those replica methods live in replica_log.py and the tiered-storage hooks
in tier_hooks.py (mixins sharing this class's state, to keep each module readable).

Replica path: a slave appends the master's bytes as they arrive (`append_replicated`, which may
end inside a record: batches are cut by size, not by record), acks, then indexes the complete
records (`dispatch_replicated`, from a dispatch cursor). The checkpoint vouches for ConsumeQueues
only up to that cursor, so recovery rebuilds the rest and cuts a partial record at the end.

Visibility: reads never return a record past `confirm_log_position`. A standalone store
(`auto_confirm=True`) confirms what is written (ASYNC_FLUSH) or what is fsynced (SYNC_FLUSH), so a
reader never sees a message that a crash could take back; under replication the master sets it.

Recovery (on open): redo an interrupted truncation, scan the CommitLog from the last checkpoint's
segment and cut at the first invalid record, trim ConsumeQueue entries past that end, rebuild the
entries the checkpoint does not vouch for by parsing the CommitLog, and recompute next offsets.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Self

import numpy as np

from storage_engine.checkpoint import Checkpoint, DirectoryLock, read_checkpoint, write_checkpoint
from storage_engine.commit_log import CommitLog, RecordRef, RecoveryScan
from storage_engine.config import FlushDiskType, StoreConfig
from storage_engine.consume_queue import CONSUME_QUEUE_ENTRY, ConsumeQueue
from storage_engine.epoch import EpochFile
from storage_engine.errors import (
    CorruptFileError,
    FsyncFailedError,
    QueueOffsetsError,
)
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
from storage_engine.names import QUEUE_ID_MAX, queue_dir, topic_name_error
from storage_engine.record_format import (
    HEADER,
    PROPERTIES_PAYLOAD_MAX_BYTES,
    encode_host,
    encode_properties,
    java_string_hash,
)
from storage_engine.replica_log import ReplicaLogMixin
from storage_engine.statuses import GetStatus, PutStatus
from storage_engine.tier_hooks import ColdTier, TieredReadsMixin, cold_result, tag_matches

__all__ = ["MessageStore", "StoreStats"]

logger = logging.getLogger(__name__)

_STORE_TIMESTAMP_AT = 56
_BYTES_TYPE = frozenset({bytes})
_CONSUME_QUEUE_DTYPE = np.dtype(
    [("log_position", ">i8"), ("size_bytes", ">i4"), ("tags_code", ">i8")])
assert _CONSUME_QUEUE_DTYPE.itemsize == CONSUME_QUEUE_ENTRY.size


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


class MessageStore(ReplicaLogMixin, TieredReadsMixin):
    """An embedded message store over one directory. Thread-safe."""

    _tier: ColdTier | None = None  # set by attach_tier (storage_engine.tiered)

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
        self.fs = fs
        self.config = config
        self._store_host = encode_host(*store_host)
        self._auto_confirm = auto_confirm
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._lock = threading.RLock()
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._next_queue_offsets: dict[str, dict[int, int]] = {}
        self._topic_meta: dict[str, bytes] = {}
        self._confirm_listeners: list[Callable[[int], None]] = []
        self._closed = False
        self._fsync_failed: FsyncFailedError | None = None  # set once: nothing flushes after
        make_dirs_durable(self.store_dir, fs)
        self._directory_lock = DirectoryLock(self.store_dir, fs)
        self._crashed = self._directory_lock.acquire()
        try:
            self._open()
        except BaseException:
            self._directory_lock.release(clean=False)
            raise
        self._flush = FlushService(
            flush=self._flush_commit_log, checkpoint=self._write_checkpoint,
            group_commit=self._sync_flush, flush_interval_ms=config.flush_interval_ms,
            checkpoint_interval_ms=config.checkpoint_interval_ms,
            flushed_log_position=self._commit_log.flushed_log_position,
            name=f"flush-{self.store_dir.name}", driven=flush_driven,
        )
        self._flush.start()

    # -- open and recovery ------------------------------------------------------------------
    def _open(self) -> None:
        path = self.store_dir / "checkpoint"
        try:
            checkpoint = read_checkpoint(path, self.fs) or Checkpoint(clean_shutdown=True)
        except CorruptFileError as err:
            logger.warning("%s; recovering from the start of the log", err)
            checkpoint = Checkpoint()
            self._crashed = True
        self._commit_log = CommitLog(self.store_dir / "commitlog",
                                     self.config.commit_log_segment_size_bytes, self.fs)
        self.epochs = EpochFile(self.store_dir / "epochFileCheckpoint", self.fs)
        if checkpoint.truncate_intent_log_position >= 0:
            logger.warning("redoing an interrupted truncation to log_position %d",
                           checkpoint.truncate_intent_log_position)
            self._commit_log.discard_from(checkpoint.truncate_intent_log_position)
        scan_from = min(checkpoint.consume_queue_log_position, checkpoint.flushed_log_position)
        self.last_recovery = self._commit_log.recover(scan_from)
        end = self.last_recovery.valid_log_position_end
        if self.last_recovery.cut_bytes:
            logger.warning("recovery cut %d bytes after log_position %d (%s)",
                           self.last_recovery.cut_bytes, end, self.last_recovery.reason)
        redispatch_from = max(min(checkpoint.consume_queue_log_position, end),
                              self._commit_log.min_log_position)
        self._load_consume_queues(redispatch_from, end)
        self._dispatch_refs(self._commit_log.iter_records(redispatch_from, end))
        self._dispatched = end
        self.epochs.truncate_from(end + 1)
        confirm = checkpoint.confirm_log_position
        if self._auto_confirm:
            confirm = end
        self._confirm = min(max(confirm, self._commit_log.min_log_position), end)
        self._commit_log.flush()
        self._write_checkpoint()

    def _load_consume_queues(self, trusted_below: int, log_end: int) -> None:
        """Open every ConsumeQueue and cut it after its last entry that is both verified
        against the recovered CommitLog and below `trusted_below` (the checkpoint's flushed
        dispatch point). Entries past it were not fsynced before a crash and may be torn or
        stale (a lost page can zero half an entry); the dispatcher rebuilds them from the log.
        """
        root = self.store_dir / "consumequeue"
        fs = self.fs
        make_dirs_durable(root, fs)
        for topic in sorted(fs.list_dir(root)):
            topic_dir = root / topic
            if topic_name_error(topic) is not None or not fs.is_dir(topic_dir):
                logger.warning("ignoring %s: not a topic's ConsumeQueue directory", topic_dir)
                continue
            for name in sorted(fs.list_dir(topic_dir)):
                if not name.isdigit() or int(name) > QUEUE_ID_MAX:
                    continue
                queue = self._consume_queue(topic, int(name))
                keep = self._last_trusted_entry(queue, trusted_below, log_end) + 1
                queue.truncate_to_queue_offset(max(keep, queue.min_queue_offset))

    def _last_trusted_entry(self, queue: ConsumeQueue, trusted_below: int, log_end: int) -> int:
        """Walk back from the queue's end (bounded: entries written since the checkpoint)."""
        topic_meta = self._meta_for(queue.topic)
        queue_offset = queue.max_queue_offset - 1
        while queue_offset >= queue.min_queue_offset:
            entry = queue.entry(queue_offset)
            if entry is not None and entry[0] < trusted_below and self._entry_matches(
                    entry, queue, queue_offset, topic_meta, log_end):
                return queue_offset
            queue_offset -= 1
        return queue_offset

    def _entry_matches(self, entry: tuple[int, int, int], queue: ConsumeQueue,
                       queue_offset: int, topic_meta: bytes, log_end: int) -> bool:
        log_position, size, _ = entry
        if size < HEADER.size or log_position + size > log_end:
            return False
        header = self._commit_log.read(log_position, HEADER.size)
        if header is None:
            return False
        fields = HEADER.unpack(header)
        if (fields[0], fields[3], fields[5], fields[6]) != (size, queue.queue_id, queue_offset,
                                                             log_position):
            return False
        topic_at = log_position + HEADER.size + fields[14]
        return self._commit_log.read(topic_at, len(topic_meta)) == topic_meta

    def _consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:  # the one place a queue's path is built: checked (names.py)
            directory = queue_dir(self.store_dir / "consumequeue", topic, queue_id)
            queue = ConsumeQueue(directory, topic, queue_id,
                                 self.config.consume_queue_segment_entries, self.fs)
            self._queues[key] = queue
        return queue

    # -- writing ----------------------------------------------------------------------------
    def put_message(self, message: Message) -> PutResult:
        return self.put_messages(message.as_batch())

    def put_messages(self, batch: MessageBatch) -> PutResult:
        """Append, then (SYNC_FLUSH) wait for the group commit. FLUSH_DISK_TIMEOUT means
        written but not known durable within `sync_flush_timeout_ms`."""
        result = self.append(batch)
        if (result.status is PutStatus.PUT_OK and self._sync_flush
                and not self.wait_flushed(result.log_position_end,
                                          self.config.sync_flush_timeout_ms)):
            return dataclasses.replace(result, status=PutStatus.FLUSH_DISK_TIMEOUT)
        return result

    def append(self, batch: MessageBatch) -> PutResult:
        """Write a batch without waiting for durability. Nothing is written when any message
        is invalid (MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED with `error` saying why)."""
        invalid = self._validate(batch)
        if invalid is not None:
            return invalid
        properties, error = self._encode_properties(batch)
        if error:
            return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, error=error)
        tags_codes = None if batch.tags is None else [
            0 if tag is None else java_string_hash(tag) for tag in batch.tags]
        with self._lock, self._fail_stop():
            if self._closed:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="store is closed")
            if self._fsync_failed is not None:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                 error=f"stopped after a failed fsync: {self._fsync_failed}")
            queue_offsets = self._assign_queue_offsets(batch.topic, batch.queue_ids)
            positions, sizes = self._commit_log.append_batch(
                topic_meta=self._meta_for(batch.topic), bodies=batch.bodies,
                properties=properties, queue_ids=batch.queue_ids, queue_offsets=queue_offsets,
                store_timestamp_ms=self._clock_ms(), store_host=self._store_host,
                born_timestamp_ms=batch.born_timestamp_ms,
                born_host=encode_host(*batch.born_host), flag=batch.flag,
            )
            self._dispatch_placed(
                batch.topic, batch.queue_ids, queue_offsets, positions, sizes, tags_codes)
            end = self._dispatched = self._put_end = self._commit_log.log_position_end
            advanced = self._auto_confirm and not self._sync_flush and end > self._confirm
            if advanced:
                self._confirm = end
        if advanced:
            self._notify_confirm(end)
        return PutResult(
            PutStatus.PUT_OK, log_position_end=end, queue_ids=batch.queue_ids,
            queue_offsets=queue_offsets, log_positions=positions,
        )

    def _validate(self, batch: MessageBatch) -> PutResult | None:
        def illegal(reason: str) -> PutResult:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, error=reason)

        reason = topic_name_error(batch.topic)
        if reason is not None:
            return illegal(reason)
        count = len(batch.bodies)
        if count == 0 or count > self.config.batch_messages_max:
            return illegal(f"batch of {count} messages, allowed 1..{self.config.batch_messages_max}")
        for name in ("queue_ids", "tags", "keys", "properties"):
            column = getattr(batch, name)
            if column is not None and len(column) != count:
                return illegal(f"{name} has {len(column)} entries for {count} bodies")
        if min(batch.queue_ids) < 0 or max(batch.queue_ids) > QUEUE_ID_MAX:
            return illegal(f"queue id outside 0..{QUEUE_ID_MAX}")
        if not set(map(type, batch.bodies)) <= _BYTES_TYPE:
            return illegal("every body must be bytes")
        largest = max(map(len, batch.bodies))
        if largest > self.config.message_size_max_bytes:
            return illegal(f"body of {largest} bytes exceeds maxMessageSize "
                           f"{self.config.message_size_max_bytes}")
        return None

    def _encode_properties(self, batch: MessageBatch) -> tuple[list[bytes] | None, str]:
        if batch.tags is None and batch.keys is None and batch.properties is None:
            return None, ""
        encoded: list[bytes] = []
        count = len(batch.bodies)
        users = batch.properties if batch.properties is not None else itertools.repeat(None, count)
        tags = batch.tags if batch.tags is not None else itertools.repeat(None, count)
        keys = batch.keys if batch.keys is not None else itertools.repeat(None, count)
        for index, (user, tag, key) in enumerate(zip(users, tags, keys)):
            if not user and tag is None and key is None:
                encoded.append(b"")  # the common row of a marked batch: nothing to encode
                continue
            merged = dict(user or {})
            if tag is not None:
                merged["TAGS"] = tag
            if key is not None:
                merged["KEYS"] = key
            try:
                payload = encode_properties(merged)
            except ValueError as err:
                return None, f"message {index}: {err}"
            if len(payload) > PROPERTIES_PAYLOAD_MAX_BYTES:
                return None, (f"message {index}: properties of {len(payload)} bytes exceed "
                              f"{PROPERTIES_PAYLOAD_MAX_BYTES}")
            encoded.append(payload)
        return encoded, ""

    def _meta_for(self, topic: str) -> bytes:
        meta = self._topic_meta.get(topic)
        if meta is None:
            raw = topic.encode("ascii")
            meta = self._topic_meta[topic] = bytes([len(raw)]) + raw
        return meta

    def _assign_queue_offsets(self, topic: str, queue_ids: Sequence[int]) -> Sequence[int]:
        """Take the next queue offsets for a batch (a range when it targets one queue)."""
        offsets = self._next_queue_offsets.get(topic)
        if offsets is None:
            offsets = self._next_queue_offsets[topic] = {}
        first_queue_id = queue_ids[0]
        if queue_ids.count(first_queue_id) == len(queue_ids):
            start = offsets.get(first_queue_id)
            if start is None:
                start = self._consume_queue(topic, first_queue_id).max_queue_offset
            offsets[first_queue_id] = start + len(queue_ids)
            return range(start, start + len(queue_ids))
        assigned = []
        for queue_id in queue_ids:
            next_offset = offsets.get(queue_id)
            if next_offset is None:
                next_offset = self._consume_queue(topic, queue_id).max_queue_offset
            assigned.append(next_offset)
            offsets[queue_id] = next_offset + 1
        return assigned

    def _dispatch_placed(
        self,
        topic: str,
        queue_ids: Sequence[int],
        queue_offsets: Sequence[int],
        positions: list[int],
        sizes: list[int],
        tags_codes: list[int] | None,
    ) -> None:
        """Write the ConsumeQueue entries of records just written (master path)."""
        pack = CONSUME_QUEUE_ENTRY.pack
        codes = tags_codes if tags_codes is not None else [0] * len(positions)
        if isinstance(queue_offsets, range):  # one queue
            entries = b"".join(list(map(pack, positions, sizes, codes)))
            self._consume_queue(topic, queue_ids[0]).append(queue_offsets[0], entries)
            return
        grouped: dict[int, tuple[int, list[bytes]]] = {}
        for index, queue_id in enumerate(queue_ids):
            group = grouped.get(queue_id)
            if group is None:
                group = grouped[queue_id] = (queue_offsets[index], [])
            group[1].append(pack(positions[index], sizes[index], codes[index]))
        for queue_id, (first_offset, parts) in grouped.items():
            self._consume_queue(topic, queue_id).append(first_offset, b"".join(parts))

    def _dispatch_refs(self, refs: object) -> int:
        """Write ConsumeQueue entries by parsing records (recovery and replication path)."""
        pending: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        pack = CONSUME_QUEUE_ENTRY.pack
        count = 0
        for ref in refs:  # type: ignore[attr-defined]
            assert isinstance(ref, RecordRef)
            key = (ref.topic, ref.queue_id)
            group = pending.get(key)
            if group is None:
                queue = self._consume_queue(ref.topic, ref.queue_id)
                expected = queue.max_queue_offset
                if ref.queue_offset < expected:
                    continue  # already indexed
                if ref.queue_offset > expected and queue.max_queue_offset > queue.min_queue_offset:
                    raise QueueOffsetsError(
                        f"consume queue {ref.topic}/{ref.queue_id} ends at {expected} but the "
                        f"record at log_position {ref.log_position} has queue_offset "
                        f"{ref.queue_offset}")
                group = pending[key] = (ref.queue_offset, [])
            elif ref.queue_offset != group[0] + len(group[1]):
                raise QueueOffsetsError(f"queue offsets of {key} are not contiguous at log_position "
                                   f"{ref.log_position}")
            group[1].append(pack(ref.log_position, ref.size_bytes, ref.tags_code))
            count += 1
        for (topic, queue_id), (first_offset, parts) in pending.items():
            self._consume_queue(topic, queue_id).append(first_offset, b"".join(parts))
            offsets = self._next_queue_offsets.setdefault(topic, {})
            offsets[queue_id] = first_offset + len(parts)
        return count

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
        return self._flush_commit_log()

    @contextlib.contextmanager
    def _fail_stop(self) -> Iterator[None]:
        """Latch any fsync failure below (a segment roll's directory fsync, a truncation, a
        checkpoint): from then on nothing flushes, checkpoints or appends (fsyncgate; in a
        broker the fsync failure handler has ended the process already)."""
        try:
            yield
        except FsyncFailedError as err:
            if self._fsync_failed is None:
                self._fsync_failed = err
            raise

    def _flush_commit_log(self) -> int:
        failed = self._fsync_failed
        if failed is not None:  # fail-stop: a later fsync may "succeed" over lost pages
            raise FsyncFailedError(failed.path, OSError(f"an earlier fsync failed: {failed}"))
        try:
            flushed = self._commit_log.flush()
        except FsyncFailedError as err:
            self._fsync_failed = err
            raise
        if self._auto_confirm and self._sync_flush:
            with self._lock:
                advanced = flushed > self._confirm and not self._closed
                if advanced:
                    self._confirm = min(flushed, self._commit_log.log_position_end)
            if advanced:
                self._notify_confirm(flushed)
        return flushed

    def _write_checkpoint(self, *, clean: bool = False, intent: int = -1) -> None:
        failed = self._fsync_failed
        if failed is not None:  # a checkpoint would vouch for pages the kernel may have lost
            raise FsyncFailedError(failed.path, OSError(f"an earlier fsync failed: {failed}"))
        with self._fail_stop():
            self._write_checkpoint_now(clean, intent)

    def _write_checkpoint_now(self, clean: bool, intent: int) -> None:
        with self._lock:
            dispatched = self._dispatched
            queues = list(self._queues.values())
            confirm = self._confirm
        for queue in queues:
            queue.flush()
        flushed = self._commit_log.flush()
        write_checkpoint(self.store_dir / "checkpoint", fs=self.fs, checkpoint=Checkpoint(
            flushed_log_position=flushed,
            consume_queue_log_position=min(dispatched, flushed),
            confirm_log_position=confirm,
            truncate_intent_log_position=intent,
            clean_shutdown=clean,
        ))

    # -- confirm position -------------------------------------------------------------------
    @property
    def confirm_log_position(self) -> int:
        return self._confirm

    def set_confirm_log_position(self, log_position: int) -> None:
        """Replication sets the commit point; it never moves past the log's end (callers
        keep it monotonic: ha/ serialises its updates)."""
        with self._lock:
            log_position = min(log_position, self._commit_log.log_position_end)
            advanced = log_position > self._confirm
            self._confirm = log_position
        if advanced:
            self._notify_confirm(log_position)

    def add_confirm_listener(self, listener: Callable[[int], None]) -> None:
        """Called (outside the store lock) whenever the confirm position advances."""
        self._confirm_listeners.append(listener)

    def _notify_confirm(self, log_position: int) -> None:
        for listener in self._confirm_listeners:
            listener(log_position)

    # -- reading ----------------------------------------------------------------------------
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
        queue, window = self._read_window(topic, queue_id, queue_offset)
        if isinstance(window, GetResult):
            cold = self._read_cold(topic, queue_id, queue_offset, window, max_count, max_bytes)
            return window if cold is None else cold_result(cold, tag_filter)
        assert queue is not None
        min_offset, max_offset = window
        count_max = max(1, min(max_count, self.config.read_messages_max))
        bytes_max = max(1, min(max_bytes, self.config.read_bytes_max))
        codes = tag_filter.codes if tag_filter is not None else None
        records: list[bytes] = []
        record_offsets: list[int] = []  # each record's queue offset (for `_still_indexed`)
        total_bytes = 0
        cursor = queue_offset
        status = GetStatus.NO_MATCHED_MESSAGE
        while cursor < max_offset and len(records) < count_max:
            raw = queue.read_entries(cursor, min(max_offset - cursor, count_max - len(records)))
            if not raw:
                break
            stop = False
            for log_position, size, code in CONSUME_QUEUE_ENTRY.iter_unpack(raw):
                if (records and total_bytes + size > bytes_max) or size <= 0:
                    stop = True  # full, or an entry a truncation zeroed under this read
                    break
                cursor += 1
                if codes is not None and (code not in codes or not tag_matches(
                        self._commit_log.read(log_position, size), tag_filter)):
                    continue
                record = self._commit_log.read(log_position, size)
                if record is None:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                    stop = True
                    break
                records.append(record)
                record_offsets.append(cursor - 1)
                total_bytes += size
                if len(records) >= count_max:
                    break
            if stop:
                break
        if records:
            status = GetStatus.FOUND
        return self._still_indexed(queue, queue_offset, record_offsets, GetResult(
            status, cursor, min_offset, max_offset, records))

    @staticmethod
    def _still_indexed(queue: ConsumeQueue, queue_offset: int, record_offsets: Sequence[int],
                       result: GetResult) -> GetResult:
        """`result` less what lies past the queue's end as it is after the read. Why: reads
        take no lock, and a truncation moves a queue's end down before it zeroes the entries
        past it (Segment.zero_from); a read that took its bounds before that may have read
        zeros, which name a 0-byte record at log position 0 (chaos finding 8)."""
        end = queue.max_queue_offset
        if result.next_queue_offset <= end:
            return result
        keep = bisect.bisect_left(record_offsets, end)
        records = result.records[:keep]
        status = result.status if records else GetStatus.NO_MATCHED_MESSAGE
        return dataclasses.replace(result, status=status, records=records,
                                   next_queue_offset=max(end, queue_offset))

    def _read_window(self, topic: str, queue_id: int, queue_offset: int
                     ) -> tuple[ConsumeQueue | None, GetResult | tuple[int, int]]:
        """The queue and its readable [min, max), or the status that ends the read now."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return None, GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        low = self._min_readable_queue_offset(queue)
        high = self._visible_max_queue_offset(queue)
        if high <= low:
            return queue, GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, low, low, high)
        if queue_offset < low:
            return queue, GetResult(GetStatus.OFFSET_TOO_SMALL, low, low, high)
        if queue_offset == high:
            return queue, GetResult(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset, low, high)
        if queue_offset > high:
            return queue, GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
        return queue, (low, high)

    def get_message_block(
        self, topic: str, queue_id: int, queue_offset: int, *, max_count: int, max_bytes: int
    ) -> RecordBlock:
        """Like get_messages without a tag filter, but the records come back to back in one
        buffer (`data`, with each record's size in `sizes`, an int64 array): records of a queue
        written together are contiguous in the CommitLog, so this is one slice per run instead
        of one per record, and the caller can decode the block with vector operations. The
        ConsumeQueue entries are scanned as arrays too (no per-entry Python step)."""
        queue, window = self._read_window(topic, queue_id, queue_offset)
        if isinstance(window, GetResult):
            cold = self._read_cold(topic, queue_id, queue_offset, window, max_count, max_bytes)
            if cold is not None:
                return cold
            return RecordBlock(window.status, window.next_queue_offset,
                               window.min_queue_offset, window.max_queue_offset)
        assert queue is not None
        min_offset, max_offset = window
        count_max = max(1, min(max_count, self.config.read_messages_max))
        positions, sizes = self._block_entries(queue, queue_offset, max_offset, count_max,
                                               max(1, min(max_bytes, self.config.read_bytes_max)))
        zeroed = np.flatnonzero(sizes <= 0)  # entries a truncation zeroed under this read
        if zeroed.size:
            positions, sizes = positions[:zeroed[0]], sizes[:zeroed[0]]
        if sizes.size == 0:
            return RecordBlock(GetStatus.NO_MATCHED_MESSAGE, queue_offset, min_offset,
                               max_offset, b"", sizes)
        block = self._read_block(positions, sizes, queue_offset, min_offset, max_offset)
        end = queue.max_queue_offset  # as in `_still_indexed`
        keep = min(len(block.sizes), max(0, end - queue_offset))
        if keep == len(block.sizes):
            return block
        status = block.status if keep else GetStatus.NO_MATCHED_MESSAGE
        return RecordBlock(status, queue_offset + keep, min_offset, max_offset,
                           block.data[:int(block.sizes[:keep].sum())], block.sizes[:keep])

    def _read_block(self, positions: np.ndarray, sizes: np.ndarray, queue_offset: int,
                    min_offset: int, max_offset: int) -> RecordBlock:
        ends = positions + sizes
        breaks = np.flatnonzero(positions[1:] != ends[:-1]) + 1
        run_first = np.concatenate(([0], breaks)).tolist()
        run_last = (np.concatenate((breaks, [sizes.size])) - 1).tolist()
        pieces = []
        for first, last in zip(run_first, run_last):
            start = int(positions[first])
            piece = self._commit_log.read(start, int(ends[last]) - start)
            if piece is None:  # retention removed it under us
                status = GetStatus.FOUND if pieces else GetStatus.MESSAGE_WAS_REMOVING
                return RecordBlock(status, queue_offset + first, min_offset, max_offset,
                                   b"".join(pieces), sizes[:first])
            pieces.append(piece)
        return RecordBlock(GetStatus.FOUND, queue_offset + sizes.size, min_offset, max_offset,
                           b"".join(pieces), sizes)

    @staticmethod
    def _block_entries(queue: ConsumeQueue, queue_offset: int, max_offset: int,
                       count_max: int, bytes_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(log_positions, sizes) of the entries from `queue_offset`: at most `count_max`, and
        after the first one only while the running size stays within `bytes_max`."""
        position_parts: list[np.ndarray] = []
        size_parts: list[np.ndarray] = []
        taken, cursor, bytes_left = 0, queue_offset, bytes_max
        while cursor < max_offset and taken < count_max:  # one pass per CQ segment crossed
            raw = queue.read_entries(cursor, min(max_offset - cursor, count_max - taken))
            if not raw:
                break
            entries = np.frombuffer(raw, dtype=_CONSUME_QUEUE_DTYPE)
            sizes = entries["size_bytes"].astype(np.int64)
            running = np.cumsum(sizes)
            keep = int(np.searchsorted(running, bytes_left, side="right"))
            if taken == 0:
                keep = max(keep, 1)
            if keep == 0:
                break
            position_parts.append(entries["log_position"][:keep].astype(np.int64))
            size_parts.append(sizes[:keep])
            taken += keep
            cursor += keep
            bytes_left -= int(running[keep - 1])
            if keep < entries.size:
                break
        if not size_parts:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(position_parts), np.concatenate(size_parts)

    def _visible_max_queue_offset(self, queue: ConsumeQueue) -> int:
        """The queue's end, less the trailing entries past the confirm position."""
        confirm = self._confirm
        end = queue.max_queue_offset
        low = queue.min_queue_offset
        scanned = 0
        while end > low and scanned < self.config.consume_queue_tail_scan_entries_max:
            entry = queue.entry(end - 1)
            if entry is None or entry[0] + entry[1] <= confirm:
                break
            end -= 1
            scanned += 1
        return end

    def _min_readable_queue_offset(self, queue: ConsumeQueue) -> int:
        """The queue's first entry whose record still exists (retention removes from the front)."""
        low, high = queue.min_queue_offset, queue.max_queue_offset
        log_min = self._commit_log.min_log_position
        first = queue.entry(low)
        if first is None or first[0] >= log_min:
            return low
        while low < high:
            mid = (low + high) // 2
            entry = queue.entry(mid)
            if entry is not None and entry[0] < log_min:
                low = mid + 1
            else:
                high = mid
        return low

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        low = 0 if queue is None else self._min_readable_queue_offset(queue)
        cold_low = None if self._tier is None else self._tier.min_queue_offset(topic, queue_id)
        return low if cold_low is None else min(low, cold_low)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue_offset a reader would wait for (only confirmed messages count)."""
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else self._visible_max_queue_offset(queue)

    def queue_offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue_offset whose store timestamp is >= `timestamp_ms` (max when none)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return self._cold_offset_for_timestamp(topic, queue_id, timestamp_ms, 0)
        low, high = self._min_readable_queue_offset(queue), self._visible_max_queue_offset(queue)
        while low < high:
            mid = (low + high) // 2
            entry = queue.entry(mid)
            header = None if entry is None else self._commit_log.read(entry[0], HEADER.size)
            if header is None:
                low = mid + 1
                continue
            store_ms = int.from_bytes(header[_STORE_TIMESTAMP_AT:_STORE_TIMESTAMP_AT + 8], "big")
            if store_ms < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        if self._tier is not None and low == self._min_readable_queue_offset(queue):
            return self._cold_offset_for_timestamp(topic, queue_id, timestamp_ms, low)
        return low

    def delete_topic(self, topic: str) -> int:
        """Drop a topic's ConsumeQueues (its records stay in the CommitLog until retention).
        Returns the number of queues removed. Raises InvalidNameError for a bad name.
        The removal is durable before this returns (the parent directory is fsynced: else a
        power cut undoes it and the deleted topic's queues come back, tests/sim)."""
        directory = queue_dir(self.store_dir / "consumequeue", topic)
        with self._lock, self._fail_stop():
            keys = [key for key in self._queues if key[0] == topic]
            for key in keys:
                self._queues.pop(key).delete_all()
            self._next_queue_offsets.pop(topic, None)
            self.fs.remove_tree(directory)
            if self.fs.exists(directory.parent):
                fsync_directory(directory.parent, self.fs)
        return len(keys)

    def queues(self) -> list[tuple[str, int]]:
        return sorted(self._queues)

    # -- retention --------------------------------------------------------------------------
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
        with self._lock:
            segments = self._commit_log.segments
            while deleted < self.config.delete_segments_per_pass_max and len(segments) > 1:
                first = segments[0]
                end = first.base_position + first.size_bytes
                if end > floor_log_position or end > self._confirm:
                    break
                if self._tier is not None and not self._tier.holds_segment(
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
            confirm_log_position=self._confirm,
            commit_log_segments=len(self._commit_log.segments),
            queue_count=len(self._queues),
            flush_count=self._flush.flush_count,
            recovered_after_crash=self._crashed,
            last_recovery=self.last_recovery,
        )

    def close(self) -> None:
        """Clean shutdown: flush everything, write a clean checkpoint, drop the abort marker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._flush.stop()
        if self._fsync_failed is not None or self._flush.failed is not None:
            self._release(clean=False)  # no clean checkpoint over lost pages: recover on open
            return
        self._write_checkpoint(clean=True)
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

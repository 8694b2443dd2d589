"""One simulated broker's log as the real storage engine over a simulated disk.

`EngineLog` has the interface of cluster_sim.SimLog (the byte model it replaces with
`--disk engine`), but every call goes to a real `MessageStore` (CommitLog segments,
ConsumeQueue, epoch file, checkpoint, confirm position) opened with `fs=SimFileSystem` and
`flush_driven=True`: the simulator decides when flushes and checkpoints happen, and a crash is
the simulated disk's power cut (unsynced bytes and directory entries lost, torn tails, flipped
bits) followed by the engine's real recovery when the store reopens. What the cluster sim calls
a record (an 8-byte message id and its 8-byte digest) is the body of one real CommitLog record
of topic `sim`, queue 0.

Effects map one to one onto what ha/broker does with the store: a master's put is `append`;
a slave's AppendLog is `append_replicated` (+ a flush step when the core asks to fsync before
its ack), DispatchLog is `dispatch_replicated`, Truncate is `truncate_to`, SetConfirm/ConfirmTo
is `set_confirm_log_position`, AppendEpoch is the epoch file's `append`, a take-over runs
ha/replication/takeover_core.py's plan (`complete_log_position_end`, `cut_tail`, confirm, epoch
entry, flush), as ha/broker/replication.py does.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

from storage_engine import (
    CorruptRecordError,
    EpochEntry,
    FlushDiskType,
    MessageBatch,
    MessageStore,
    PutStatus,
    StoreConfig,
    decode_record,
)
from storage_engine.record_format import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from tests.sim.sim_fs import SimDiskFaults, SimFileSystem

__all__ = ["ENGINE_CONFIG", "DiskFailedError", "EngineLog"]

TOPIC = "sim"
_PREFIX = struct.Struct(">iI")  # a CommitLog record's TOTALSIZE and MAGICCODE
# Small segments: a few seconds of puts roll CommitLog and ConsumeQueue files, so segment
# boundaries, blank records and directory fsyncs are on the replicated path too.
ENGINE_CONFIG = StoreConfig(commit_log_segment_size_bytes=68 * 1024, message_size_max_bytes=1024,
                            consume_queue_segment_entries=64,
                            flush_disk_type=FlushDiskType.SYNC_FLUSH)


class DiskFailedError(Exception):
    """A flush or checkpoint step failed (an fsync failed): the broker must stop."""


class EngineLog:
    """SimLog's interface over a real MessageStore on a SimFileSystem (see the docstring)."""

    segment_size_bytes = ENGINE_CONFIG.commit_log_segment_size_bytes

    def __init__(self, name: str, rng: random.Random, faults: SimDiskFaults,
                 clock_ms: Callable[[], int], *,
                 sync_failure_allowed: Callable[[], bool] = lambda: True) -> None:
        self.fs = SimFileSystem(rng, faults, clock_ms=clock_ms,
                                sync_failure_allowed=sync_failure_allowed)
        self._faults = faults
        self._clock_ms = clock_ms
        self._directory = Path("/") / name / "store"
        self.version = 0  # +1 whenever bytes are cut (truncation, crash)
        self._visible_key: tuple[int, ...] = ()
        self._visible_end = 0
        self.store = self._open()

    def _open(self) -> MessageStore:
        self.fs.faults = SimDiskFaults()  # recovery runs on a quiet disk; faults hit later
        self._sync_failures_at_open = self.fs.stats.sync_failures
        try:
            return MessageStore(self._directory, ENGINE_CONFIG, auto_confirm=False,
                                clock_ms=self._clock_ms, fs=self.fs, flush_driven=True)
        finally:
            self.fs.faults = self._faults

    # -- what SimLog exposes ------------------------------------------------------------------
    @property
    def end(self) -> int:
        return self.store.log_position_end

    @property
    def synced(self) -> int:
        return self.store.stats().flushed_log_position

    @property
    def confirm(self) -> int:
        return self.store.confirm_log_position

    @property
    def epochs(self) -> list[EpochEntry]:
        return list(self.store.epochs.entries)

    def append(self, position: int, data: bytes) -> None:
        self.store.append_replicated(position, data)

    def append_record(self, record: bytes) -> tuple[int, int]:
        """A master's put of one record: (its log_position, the log's end after it)."""
        result = self.store.append(MessageBatch(topic=TOPIC, bodies=[record], queue_ids=[0]))
        assert result.status is PutStatus.PUT_OK, result
        return result.log_positions[0], result.log_position_end

    def append_epoch(self, entry: EpochEntry) -> None:
        self.store.epochs.append(entry.epoch, entry.start_log_position)

    def dispatch(self) -> None:
        self.store.dispatch_replicated()

    def sync(self) -> None:
        if not self.store.flush_step():
            raise DiskFailedError(f"flush of {self._directory} failed")

    def checkpoint(self) -> None:
        if not self.store.checkpoint_step():
            raise DiskFailedError(f"checkpoint of {self._directory} failed")

    def heal(self) -> None:
        """The run's faults are over: this disk no longer fails (nor tears at a crash)."""
        self._faults = self.fs.faults = SimDiskFaults()

    def disk_failed(self) -> bool:
        """An fsync failed since this store opened (the process must stop)."""
        return self.fs.stats.sync_failures > self._sync_failures_at_open

    def truncate(self, position: int) -> None:
        if position < self.end:
            self.version += 1
        self.store.truncate_to(position)

    def complete_end(self) -> int:
        """Where the last whole record ends (a take-over cuts there:
        ha/replication/takeover_core.py)."""
        return self.store.complete_log_position_end()

    def record_end_at(self, position: int) -> int | None:
        """Where the record holding the byte at `position` ends, whole or not (None: no
        record header leads there). Walks the TOTALSIZE headers from the segment's start."""
        size = self.segment_size_bytes
        segment_end = position - position % size + size
        at = position - position % size
        while at <= position:
            head = self.store.read_log(at, _PREFIX.size)
            if len(head) < _PREFIX.size:
                return None
            total, magic = _PREFIX.unpack(head)
            if magic == BLANK_MAGIC_CODE:
                return segment_end
            if magic != MESSAGE_MAGIC_CODE or total < _PREFIX.size:
                return None
            at += total
        return at

    def cut_tail(self, position: int) -> None:
        end = self.end
        self.store.cut_tail(position)
        if self.end < end:
            self.version += 1

    def set_confirm(self, position: int) -> None:
        self.store.set_confirm_log_position(max(self.confirm, min(position, self.end)))

    def crash(self, rng: random.Random, torn_probability: float) -> None:
        """A power cut (the disk's own seeded faults apply), then the engine's recovery."""
        self.fs.crash()
        self.version += 1
        self.store = self._open()

    # -- reading ------------------------------------------------------------------------------
    def read(self, start: int, size: int) -> bytes:
        """Bytes from `start` within one segment (what a master ships)."""
        return self.store.read_log(start, size)

    def read_range(self, start: int, end: int) -> bytes:
        parts = []
        while start < end:
            chunk = self.store.read_log(start, end - start)
            if not chunk:
                break
            parts.append(chunk)
            start += len(chunk)
        return b"".join(parts)

    def record_body(self, position: int) -> bytes | None:
        """The body of the record at `position` (None: no valid record there)."""
        head = self.store.read_log(position, 4)
        if len(head) < 4:
            return None
        raw = self.store.read_log(position, int.from_bytes(head, "big"))
        try:
            return decode_record(raw).body
        except CorruptRecordError:
            return None

    def read_records(self, queue_offset: int, count_max: int) -> list[tuple[int, int, bytes]]:
        """A consumer's pull through the engine's read path (ConsumeQueue, then CommitLog;
        never past the confirm position): (log_position, end, body) of each record."""
        got = self.store.get_messages(TOPIC, 0, queue_offset, max_count=count_max,
                                      max_bytes=count_max * 1024)
        return [(m.log_position, m.log_position + m.size_bytes, m.body) for m in got.messages()]

    def visible_end(self) -> int:
        """Where the last record a consumer can read ends (0: none): must be <= confirm.
        Asked after every event: answered again only when the log or its confirm moved."""
        confirm = self.store.confirm_log_position
        key = (self.version, confirm, min(confirm, self.store.dispatched_log_position))
        if key != self._visible_key:
            self._visible_key, self._visible_end = key, self._read_visible_end()
        return self._visible_end

    def _read_visible_end(self) -> int:
        queue_offset = self.store.max_queue_offset(TOPIC, 0)
        if queue_offset == 0:
            return 0
        got = self.store.get_messages(TOPIC, 0, queue_offset - 1, max_count=1, max_bytes=1024)
        if not got.records:
            return 0
        message = decode_record(got.records[0])
        return message.log_position + message.size_bytes

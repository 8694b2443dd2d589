"""Broker state kept as records in the replica set's CommitLog, so a failover never loses a
change the broker answered OK.

Why (issue 18, chaos findings 1 and 3): consumer-group offsets and topic configs used to be
answered once they were in the master's own JSON file; slaves got the files at most every
haMetadataSyncInterval, so a slave elected before the next sync lacked them (an offset moved
back; a topic created with 3 queues was unknown, or re-created with the default count), and a
cut-off master kept accepting changes the new master never saw. Now each change is a message of
an internal topic (Kafka's __consumer_offsets), and the state is a pure fold over those records
(a `Fold`: ha/broker/offset_table.py, ha/broker/metadata.py):

    a change (master)
        one record in queue 0 of the internal topic, written by Replication.put like any
        message: needAckNums, the SyncStateSet, fencing and the master lease all apply, so a
        deposed, paused or cut-off master cannot acknowledge one (its put fails like any put)
        PUT_OK -> applied to the fold -> answered OK
        stored but not PUT_OK -> answered with that status (the change may or may not stay:
        the record is "pending" and is applied, in log order, once a later record is PUT_OK,
        which means every byte before it is on the quorum too)
    every replica (catch_up: every CATCH_UP_INTERVAL_MS, and before some reads)
        applies the records below its confirm position, which a failover never truncates
    take-over (Replication.become_master, before the fence lifts)
        applies every record up to the log's end (the confirm position was raised there)
    the JSON file (consumerOffset.json, topics.json)
        a snapshot: the fold and the queue offset of the internal topic it covers, written
        every flush interval when it changed, and at close; a restart replays from it

Order: `_write_lock` is held from a change's put to its apply (and by catch-up and take-over),
so the records are applied in queue-offset order, the order every replica replays them in.
Reads take only `_state_lock`, never waiting behind a put.

Records that retention removed before this replica applied them (a replica that joined with
`reset_to`, or was down past fileReservedTime): a slave takes the master's snapshot, which
travels in the HA metadata (`metadata_json` / `note_master_snapshot` of each user); a
take-over that still finds them gone skips them with a WARNING.

One internal topic per kind of state (OFFSETS_TOPIC, TOPICS_TOPIC), not one topic for both:
each snapshot file covers its own queue offset, so neither file's format depends on the other
and the files from before records stay readable; offset commits (hundreds a second) never queue
a topic change (rare, but paid by a producer's first put into a new topic) behind them.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from storage_engine import (
    CorruptRecordError,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutResult,
    PutStatus,
    StorageError,
    atomic_write_bytes,
    decode_record,
)

__all__ = ["Fold", "SystemLog", "SystemLogLimitError"]

logger = logging.getLogger(__name__)

CATCH_UP_INTERVAL_MS = 1000  # a replica applies newly confirmed records this often
CATCH_UP_MESSAGES = 1024  # records per read of the internal topic
CATCH_UP_BYTES_MAX = 4 << 20
CATCH_UP_READS_MAX = 1 << 20  # bounds one catch-up (1G records)
PENDING_RECORDS_MAX = 10_000  # written, not yet acknowledged: past this, changes are refused
CONFIRM_POLL_MS = 5  # the rare wait for earlier records to be confirmed polls this often


class SystemLogLimitError(Exception):
    """A change refused before anything was written (a table full, or unacknowledged records
    piling up on a master that cannot reach its quorum)."""


class Fold(Protocol):
    """The state after applying the records [0, applied_queue_offset) in order (pure)."""

    applied_queue_offset: int

    def apply(self, queue_offset: int, body: bytes) -> object | None:
        """Apply the next record; None when it was skipped (undecodable...)."""

    def skip_to(self, queue_offset: int) -> int:
        """Move past records retention removed; returns how many."""

    def to_json(self) -> dict[str, Any]:
        """The snapshot, with `applied_queue_offset`."""


F = TypeVar("F", bound=Fold)


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    queue_offset: int
    log_position: int
    body: bytes


class SystemLog(Generic[F]):
    """One fold over the records of queue 0 of `topic` (see the module docstring)."""

    def __init__(self, *, kind: str, topic: str, snapshot_path: Path, store: MessageStore,
                 put: Callable[[MessageBatch], PutResult], flush_interval_ms: int,
                 write_timeout_ms: int, load: Callable[[Any], F],
                 empty: Callable[[], F]) -> None:
        self.kind = kind  # "offset", "topic": named in logs
        self.topic = topic
        self._path = snapshot_path
        snapshot_path.parent.mkdir(parents=True, exist_ok=True)
        self._store = store
        self._put = put
        self._flush_interval_s = flush_interval_ms / 1000.0
        self._write_timeout_s = write_timeout_ms / 1000.0
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._fold: F = self._load(load, empty)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._master_snapshot: F | None = None  # from the HA metadata (a slave)
        self._version = 0  # bumped by every change of the fold
        self._flushed_version = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{kind}-log", daemon=True)
        self.records_written = 0
        self.records_applied = 0
        self.records_lost = 0  # removed by retention before this replica applied them

    def start(self) -> SystemLog[F]:
        """Apply what is confirmed before the broker serves (a restart's snapshot may lag the
        log: a change decided on a lagging fold would be decided wrong), then keep up."""
        self.catch_up()
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._flush_snapshot()

    def _load(self, load: Callable[[Any], F], empty: Callable[[], F]) -> F:
        if not self._path.exists():
            return empty()
        try:
            return load(json.loads(self._path.read_text()))
        except (ValueError, TypeError, KeyError, RecursionError) as err:  # written atomically
            logger.warning("%s is unreadable (%.200s): replaying every %s record",
                           self._path, err, self.kind)
            return empty()

    # -- writes (master) --------------------------------------------------------------------
    def _write(self, body: bytes, needed: Callable[[F], bool] | None = None
               ) -> PutResult | None:
        """Write `body` and apply it once PUT_OK. `needed(fold)` (under the write lock, so no
        other change slips in between): False means the fold already says what the record
        would, nothing is written and None returned. Raises SystemLogLimitError before
        writing, or what the put raises (NOT_MASTER)."""
        with self._write_lock:
            if needed is not None:
                self._catch_up_locked(take_over=False)  # decide on every confirmed record
                with self._state_lock:
                    if not needed(self._fold):
                        return None
            if len(self._pending) >= PENDING_RECORDS_MAX:
                raise SystemLogLimitError(f"{len(self._pending)} {self.kind} records are "
                                          "waiting for the quorum (pendingRecordsMax): "
                                          "changes paused")
            result = self._put(MessageBatch(topic=self.topic, bodies=[body], queue_ids=[0],
                                            born_timestamp_ms=int(time.time() * 1000)))
            if not result.status.stored:
                return result
            self.records_written += 1
            queue_offset = result.queue_offsets[0]
            self._pending.append(_Pending(queue_offset, result.log_positions[0], body))
            if result.status is not PutStatus.PUT_OK:
                return result
            if not self._apply_pending(queue_offset):
                return dataclasses.replace(result, status=PutStatus.FLUSH_SLAVE_TIMEOUT, error=(
                    f"earlier {self.kind} records were not confirmed in time; this one is kept "
                    "and applied with them"))
            return result

    def _apply_pending(self, queue_offset: int) -> bool:
        """Apply every record up to `queue_offset` (just acknowledged: the quorum holds every
        byte before it too), in queue-offset order. A record this process did not write or
        lost track of (a restart, a put that raised after its append) is read from the log
        once the confirm position reaches the pending record after it. False: that did not
        happen within the write timeout (the records stay pending)."""
        deadline = time.monotonic() + self._write_timeout_s
        while self._fold.applied_queue_offset <= queue_offset:
            self._drop_applied_pending()
            applied = self._fold.applied_queue_offset
            if not self._pending:
                return False  # applied past what was pending, short of queue_offset: a bug
            if self._pending[0].queue_offset == applied:
                pending = self._pending.popleft()
                self._apply(pending.queue_offset, pending.body)
                continue
            while self._store.confirm_log_position < self._pending[0].log_position:
                if time.monotonic() >= deadline or self._stopping.is_set():
                    return False
                time.sleep(CONFIRM_POLL_MS / 1000.0)  # rare: see the docstring
            self._catch_up_locked(take_over=False)
            if self._fold.applied_queue_offset == applied:
                return False  # the records are gone (retention): catch-up waits for them
        return True

    def _drop_applied_pending(self) -> None:
        applied = self._fold.applied_queue_offset
        while self._pending and self._pending[0].queue_offset < applied:
            self._pending.popleft()

    def _apply(self, queue_offset: int, body: bytes) -> None:
        with self._state_lock:
            record = self._fold.apply(queue_offset, body)
            self._version += 1
        self.records_applied += 1
        if record is None:
            logger.warning("skipped %s record %d of %s: not a valid %s record", self.kind,
                           queue_offset, self.topic, self.kind)

    # -- replay (every replica) -------------------------------------------------------------
    def catch_up(self, *, wait: bool = True) -> None:
        """Apply the records confirmed since the last pass (wait=False: skip the pass when a
        change or another pass holds the write lock)."""
        if not self._write_lock.acquire(blocking=wait):
            return
        try:
            self._catch_up_locked(take_over=False)
        finally:
            self._write_lock.release()

    def take_over(self) -> None:
        """A new master (its confirm position at its log's end, its fence still up): apply
        every record in the log, forget what the last term left pending."""
        with self._write_lock:
            self._pending.clear()
            self._catch_up_locked(take_over=True)
            end = self._store.max_queue_offset(self.topic, 0)
            if self._fold.applied_queue_offset > end:  # the fold has records the log lacks
                logger.warning("the %s table covers %d records of %s, the log %d: the next "
                               "record is %d (the table keeps what it applied)", self.kind,
                               self._fold.applied_queue_offset, self.topic, end, end)
                with self._state_lock:
                    self._fold.applied_queue_offset = end
                    self._version += 1

    def _catch_up_locked(self, *, take_over: bool) -> None:
        store = self._store
        for _ in range(CATCH_UP_READS_MAX):
            applied = self._fold.applied_queue_offset
            result = store.get_messages(self.topic, 0, applied, max_count=CATCH_UP_MESSAGES,
                                        max_bytes=CATCH_UP_BYTES_MAX)
            if result.records:
                for raw in result.records:
                    self._apply_raw(raw)
                continue
            if result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE or \
                    applied >= result.min_queue_offset:
                return  # nothing new (or the fold is ahead of the log: take_over sees it)
            if not self._records_gone(result.min_queue_offset, take_over=take_over):
                return

    def _apply_raw(self, raw: bytes) -> None:
        applied = self._fold.applied_queue_offset
        try:
            message = decode_record(raw)
        except CorruptRecordError as err:  # the read verified it; count it, never stop here
            logger.warning("%s record %d of %s does not decode: %s", self.kind, applied,
                           self.topic, err)
            self._apply(applied, b"")
            return
        if message.queue_offset != applied:
            logger.warning("%s record at queue offset %d where %d was expected", self.kind,
                           message.queue_offset, applied)
            if message.queue_offset < applied:
                return
            with self._state_lock:
                self._fold.skip_to(message.queue_offset)
        self._apply(message.queue_offset, message.body)

    def _records_gone(self, first_readable: int, *, take_over: bool) -> bool:
        """Records [applied, first_readable) are gone from this log. True: the fold moved on
        (the master's snapshot, or a take-over skipping them); False: wait for the snapshot."""
        snapshot = self._master_snapshot
        if snapshot is not None and snapshot.applied_queue_offset > \
                self._fold.applied_queue_offset:
            logger.info("%s records before %d are gone here: taking the master's table (up "
                        "to record %d)", self.kind, first_readable,
                        snapshot.applied_queue_offset)
            with self._state_lock:
                self._fold = snapshot
                self._version += 1
            self._master_snapshot = None
            return True
        if not take_over:
            return False
        with self._state_lock:
            lost = self._fold.skip_to(first_readable)
            self._version += 1
        self.records_lost += lost
        logger.warning("%d %s records of %s were removed before this broker applied them "
                       "(retention); the state they changed keeps its older value", lost,
                       self.kind, self.topic)
        return True

    # -- HA metadata (users name their keys) ------------------------------------------------
    def _note_master_snapshot(self, snapshot: F) -> None:
        """A slave: keep the master's fold for records retention removes here."""
        self._master_snapshot = snapshot

    def _read(self, read: Callable[[F], Any]) -> Any:
        with self._state_lock:
            return read(self._fold)

    @property
    def applied_queue_offset(self) -> int:
        return self._fold.applied_queue_offset

    # -- background -------------------------------------------------------------------------
    def _loop(self) -> None:
        flushed_at = time.monotonic()
        while not self._stopping.wait(CATCH_UP_INTERVAL_MS / 1000.0):  # ends with close()
            try:
                self.catch_up(wait=False)
                if time.monotonic() - flushed_at >= self._flush_interval_s:
                    flushed_at = time.monotonic()
                    self._flush_snapshot()
            except (StorageError, OSError) as err:  # the next pass tries again
                logger.warning("%s catch-up or snapshot failed: %s", self.kind, err)

    def _flush_snapshot(self) -> None:
        with self._state_lock:
            version = self._version
            if version == self._flushed_version:
                return
            payload = json.dumps(self._fold.to_json()).encode()
        atomic_write_bytes(self._path, payload)
        self._flushed_version = version

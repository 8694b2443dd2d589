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
        (each record is checked: the one expected, and ending at or below the confirm
        position)
    take-over (Replication.become_master, before the fence lifts)
        applies every record up to the log's end (the confirm position was raised there)
    the JSON file (consumerOffset.json, topics.json)
        a snapshot: the fold, the queue offset of the internal topic it covers and the log
        position of its last record (`applied_log_position`), written every flush interval
        when it changed, and at close; a restart replays from it

Order: `_write_lock` is held from a change's put to its apply (and by catch-up and take-over),
so the records are applied in queue-offset order, the order every replica replays them in.
Reads take only `_state_lock`, never waiting behind a put.

A read that does not hold the confirmed record it was after (chaos finding 8): reads take no
lock, so a catch-up can run into a fork truncation, whose zeroed ConsumeQueue entries read as
0-byte records past the confirm check (the store now moves the queue's end down before it
zeroes and re-checks the end after a read; the fold does not rely on that). Such a read
(undecodable, another record, or a record past the confirm position) ends the pass and is retried
next pass; it is never applied as a skipped record (which moved the fold past queue offsets the new
master's records then filled, and those were never applied). A record that decodes but whose body
the fold refuses is skipped, as it is on every replica. A record that stays unreadable (corrupt on
this replica) stops this replica's fold before it: counted (`records_unreadable`), logged once and
then at ERROR every UNREADABLE_LOG_INTERVAL_S, never skipped (skipping could undo an acknowledged
change on this replica only).

A truncation that cuts records the fold had applied (the store's `lowest_cut_since`; or a
snapshot file covering records the log lacks after a restart) rolls the fold back: the newest
restore point below the cut (one of the last RESTORE_POINTS_KEPT snapshots, or the last one
taken all below the confirm position, which a cut never goes below; each knows the log
position of its last record), else the base (no record), replayed aside to the readable end
and swapped in at once, so readers never see the fold go back further than the cut. A replay
that finds records removed by retention takes the master's snapshot as below; without one a
replica waits (the fold stays as it was) and a take-over keeps the fold as it was (ERROR):
skipping them would lose far more than the cut records changed. A log restarted past the cut
(`reset_to`: its records went, none forked) keeps the fold. Records below the confirm
position are never cut, so a fold that applies only those (every replica's catch-up) is never
rolled back; the rollback covers what a master applied on PUT_OK above its local confirm
position and anything a future bug lets through. Cost (`python3 build.py bench system_log`):
a replay of 100,000 offset records takes ~1.4 s; a rollback to a snapshot just below the cut,
the time to load it (1.3 ms for 1,000 groups, 16 ms for 10,000).

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
RESTORE_POINTS_KEPT = 3  # recent snapshots a rollback after a cut may restart from
UNREADABLE_LOG_INTERVAL_S = 60.0  # a record that keeps failing to read is logged this often


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


@dataclasses.dataclass(frozen=True, slots=True)
class _RestorePoint:
    """A snapshot a rollback may restart from: the fold's JSON, and the log position of the
    last record it covers (-1: none that a truncation could cut)."""

    last_log_position: int
    payload: bytes


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
        self._flush_lock = threading.Lock()  # a snapshot's write, and a rollback's swap
        self._load_fold = load
        self._seen_cuts = store.index_cuts  # cuts before this point are in what we load
        self._restore_points: collections.deque[_RestorePoint] = collections.deque(
            maxlen=RESTORE_POINTS_KEPT)
        self._fold: F
        self._applied_log_position: int  # the last applied record's (-1: none cut-able)
        self._base: _RestorePoint  # a rollback's last resort: no record applied
        # The newest snapshot whose records were all below the confirm position when it was
        # taken: a cut never goes below the confirm position, so it always lies below a cut.
        self._confirmed_point: _RestorePoint | None = None
        self._forced_cut: int | None = None  # the snapshot covers records the log lacks
        self._load(load, empty)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._master_snapshot: F | None = None  # from the HA metadata (a slave)
        self._version = 0  # bumped by every change of the fold
        self._flushed_version = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"{kind}-log", daemon=True)
        self._unreadable_at = -1  # the queue offset whose read last failed
        self._unreadable_logged_s = 0.0
        self.records_written = 0
        self.records_applied = 0
        self.records_lost = 0  # removed by retention before this replica applied them
        self.records_unreadable = 0  # reads that ended a pass (torn, corrupt): retried
        self.rollbacks = 0  # rebuilds after a truncation cut records the fold had applied

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

    def _load(self, load: Callable[[Any], F], empty: Callable[[], F]) -> None:
        """The fold from the snapshot file, and where a rollback may restart: the file itself
        when it says the log position of its last record, else only the base (a file from
        before records, or none: no record applied)."""
        self._fold = empty()
        self._applied_log_position = -1
        known = True  # the file says where its last record is
        if self._path.exists():
            try:
                raw = json.loads(self._path.read_text())
                self._fold = load(raw)
            except (ValueError, TypeError, KeyError, RecursionError) as err:  # atomic writes
                logger.warning("%s is unreadable (%.200s): replaying every %s record",
                               self._path, err, self.kind)
                raw = {}
            position = raw.get("applied_log_position") if isinstance(raw, dict) else None
            if self._fold.applied_queue_offset == 0:
                position = -1
            elif not isinstance(position, int) or isinstance(position, bool) or position < -1:
                # written before snapshots said it: a cut in the log may have removed its
                # records (until the next snapshot says where they end); no restore point
                known, position = False, self._store.log_position_end - 1
            self._applied_log_position = position
            if position >= self._store.log_position_end and position >= 0:
                self._forced_cut = self._store.log_position_end  # records the log lacks
        payload = json.dumps(self._fold.to_json()).encode()
        base = self._fold if self._fold.applied_queue_offset == 0 else empty()
        self._base = _RestorePoint(-1, json.dumps(base.to_json()).encode())
        if self._fold.applied_queue_offset and self._forced_cut is None and known:
            point = _RestorePoint(self._applied_log_position, payload)
            self._restore_points.append(point)
            if point.last_log_position < self._store.confirm_log_position:
                self._confirmed_point = point

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
                self._apply(pending.queue_offset, pending.body, pending.log_position)
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

    def _apply(self, queue_offset: int, body: bytes, log_position: int) -> None:
        """Apply the next record to the live fold (readers see it at once)."""
        with self._state_lock:
            record = self._fold.apply(queue_offset, body)
            self._applied_log_position = log_position
            self._version += 1
        self._applied(queue_offset, record)

    def _applied(self, queue_offset: int, record: object | None) -> None:
        self.records_applied += 1
        if record is None:
            logger.warning("skipped %s record %d of %s: not a valid %s record", self.kind,
                           queue_offset, self.topic, self.kind)
        if queue_offset == self._unreadable_at:
            logger.info("%s record %d of %s was read and applied", self.kind, queue_offset,
                        self.topic)
            self._unreadable_at = -1

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
        if self._roll_back_cut_records(take_over=take_over):
            self._advance(self._fold, take_over=take_over, live=True)

    def _advance(self, fold: F, *, take_over: bool, live: bool) -> tuple[F, int, bool]:
        """Apply the log's readable records after `fold.applied_queue_offset`: to the live
        fold (`live`, each under the state lock), or to a fold being rebuilt aside. Returns
        the fold (the master's snapshot may replace it), the log position of the last record
        applied here (-1: none), and whether the pass reached the end of what is readable
        (False: an unreadable record, or removed ones whose snapshot has not come)."""
        store = self._store
        last_position = -1
        for _ in range(CATCH_UP_READS_MAX):
            applied = fold.applied_queue_offset
            result = store.get_messages(self.topic, 0, applied, max_count=CATCH_UP_MESSAGES,
                                        max_bytes=CATCH_UP_BYTES_MAX)
            if result.records:
                for raw in result.records:
                    position = self._apply_raw(fold, raw, live=live)
                    if position is None:
                        return fold, last_position, False
                    last_position = position
                continue
            if result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE or \
                    applied >= result.min_queue_offset:
                return fold, last_position, True  # nothing new (or the fold is ahead of the
                # log: take_over sees it)
            replacement = self._records_gone(fold, result.min_queue_offset,
                                             take_over=take_over, live=live)
            if replacement is None:
                return fold, last_position, False
            fold = replacement
        return fold, last_position, False

    def _apply_raw(self, fold: F, raw: bytes, *, live: bool) -> int | None:
        """Apply the record `raw` if it is the confirmed record of `fold`'s next queue offset;
        returns its log position, or None: the read did not hold it (the pass ends there, the
        record is read again next pass).

        Why a record that does not decode is never skipped (chaos finding 8): reads take no
        lock, so one can run into a fork truncation; while the truncation zeroes the
        ConsumeQueue, its entries read as (0, 0, 0) - a 0-byte "record" that passes the
        confirm check - and a record cut from the CommitLog reads as zeros. Skipping such a
        read moved the fold past queue offsets that the new master's records filled next, and
        those were never applied. A record that decodes but whose body the fold refuses is
        skipped (`_apply`: a bad record is the same on every replica)."""
        applied = fold.applied_queue_offset
        try:
            message = decode_record(raw)
        except CorruptRecordError as err:
            self._unreadable(applied, f"does not decode ({err})")
            return None
        if (message.topic, message.queue_id, message.queue_offset) != (self.topic, 0, applied):
            self._unreadable(applied, f"reads as record {message.queue_offset} of "
                                      f"{message.topic}/{message.queue_id}")
            return None
        confirm = self._store.confirm_log_position
        if message.log_position + message.size_bytes > confirm:  # never applied: it may go
            self._unreadable(applied, f"ends past the confirm position {confirm}")
            return None
        if live:
            self._apply(message.queue_offset, message.body, message.log_position)
        else:
            self._applied(message.queue_offset, fold.apply(message.queue_offset, message.body))
        return message.log_position

    def _unreadable(self, queue_offset: int, reason: str) -> None:
        """Count a read that ended a pass; log it once, and again every
        UNREADABLE_LOG_INTERVAL_S while the same record keeps failing (catch-up runs before
        reads too: a log line per pass would flood). What a torn read showed passes with the
        truncation; a record that fails for minutes is corrupt on this replica, and the fold
        stays before it rather than diverge from the other replicas (an ERROR says so)."""
        self.records_unreadable += 1
        now = time.monotonic()
        if queue_offset != self._unreadable_at:
            self._unreadable_at = queue_offset
            self._unreadable_logged_s = now
            logger.warning("%s record %d of %s %s: this pass ends before it (retried next "
                           "pass)", self.kind, queue_offset, self.topic, reason)
        elif now - self._unreadable_logged_s >= UNREADABLE_LOG_INTERVAL_S:
            self._unreadable_logged_s = now
            logger.error("%s record %d of %s still %s: this replica's %s table stays before "
                         "it (%d failed reads so far; a corrupt record here: copy the store "
                         "from a replica that holds it)", self.kind, queue_offset, self.topic,
                         reason, self.kind, self.records_unreadable)

    def _roll_back_cut_records(self, *, take_over: bool) -> bool:
        """After a truncation (a fork cut, a reset) that removed records the fold had applied,
        return to a state below the cut: the newest restore point (a snapshot) whose records
        all lie below it, else the base, replayed aside up to the readable end and swapped in
        at once (readers never see the fold go back to the restore point). Pending records
        at or past the cut are forgotten (they are not in the log any more).

        A rebuild that cannot finish (records removed by retention, and no master's snapshot
        yet; an unreadable record): a replica retries next pass and returns False (the fold
        stays as it was, not advanced on a base that is gone); a take-over keeps the fold as
        it is and says so at ERROR (skipping the removed records would lose every change they
        made, a far larger loss than what the cut records changed)."""
        store = self._store
        cuts = store.index_cuts
        forced = self._forced_cut
        if cuts == self._seen_cuts and forced is None:
            return True
        cut = store.lowest_cut_since(self._seen_cuts)
        if forced is not None:
            cut = forced if cut is None else min(cut, forced)
        if cut is None:
            self._seen_cuts = cuts
            return True
        self._pending = collections.deque(p for p in self._pending if p.log_position < cut)
        if cut < store.min_log_position:  # the log restarted past it (reset_to): the records
            # went, none was forked (the fold applied confirmed ones): the fold and the
            # restore points stay, and the gap after it is filled as before (_records_gone)
            logger.info("the %s log restarted at log position %d: the table keeps the %d "
                        "records it applied", self.kind, store.min_log_position,
                        self._fold.applied_queue_offset)
            self._seen_cuts, self._forced_cut = cuts, None
            return True
        if self._applied_log_position < cut:  # nothing it applied was cut
            with self._flush_lock:
                kept = [point for point in self._restore_points
                        if point.last_log_position < cut]
                self._restore_points.clear()
                self._restore_points.extend(kept)
            self._seen_cuts, self._forced_cut = cuts, None
            return True
        with self._flush_lock:
            points = [point for point in (self._confirmed_point, *self._restore_points)
                      if point is not None and point.last_log_position < cut]
        point = max(points, key=lambda point: point.last_log_position, default=self._base)
        started = time.monotonic()
        fold = self._load_fold(json.loads(point.payload))
        restored = fold.applied_queue_offset
        fold, position, done = self._advance(fold, take_over=take_over, live=False)
        if not done and take_over:
            logger.error("%s records of %s from log position %d were cut, and the table had "
                         "applied some: its rebuild from record %d stopped at %d; the new "
                         "master keeps the table as it was", self.kind, self.topic, cut,
                         restored, fold.applied_queue_offset)
            self._seen_cuts, self._forced_cut = cuts, None
            return True
        if not done:
            logger.warning("%s records of %s from log position %d were cut, and the table "
                           "had applied some: its rebuild from record %d stopped at %d "
                           "(retried next pass)", self.kind, self.topic, cut, restored,
                           fold.applied_queue_offset)
            return False
        with self._flush_lock, self._state_lock:  # no snapshot of the old fold lands after
            dropped = self._fold.applied_queue_offset
            self._fold = fold
            self._applied_log_position = point.last_log_position if position < 0 else position
            self._version += 1
            kept = [point for point in self._restore_points if point.last_log_position < cut]
            self._restore_points.clear()
            self._restore_points.extend(kept)
            if self._confirmed_point is not None and \
                    self._confirmed_point.last_log_position >= cut:  # a reset_to
                self._confirmed_point = None
        self._seen_cuts, self._forced_cut = cuts, None
        self.rollbacks += 1
        logger.warning("%s records of %s from log position %d were cut, the table had "
                       "applied them (up to record %d): rebuilt from the snapshot of %d "
                       "records and %d replayed in %.0f ms", self.kind, self.topic, cut,
                       dropped, restored, fold.applied_queue_offset - restored,
                       (time.monotonic() - started) * 1000)
        return True

    def _records_gone(self, fold: F, first_readable: int, *, take_over: bool,
                      live: bool) -> F | None:
        """Records [applied, first_readable) are gone from this log. The fold to go on with
        (the master's snapshot, or `fold` past them on a take-over), or None: wait for the
        snapshot. The master's snapshot covers records its master applied (acknowledged, never
        cut): the applied log position stays as it was."""
        snapshot = self._master_snapshot
        if snapshot is not None and snapshot.applied_queue_offset > fold.applied_queue_offset:
            logger.info("%s records before %d are gone here: taking the master's table (up "
                        "to record %d)", self.kind, first_readable,
                        snapshot.applied_queue_offset)
            if live:
                with self._state_lock:
                    self._fold = snapshot
                    self._version += 1
            self._master_snapshot = None
            return snapshot
        if not take_over or not live:  # a rebuild never skips (see _roll_back_cut_records)
            return None
        with self._state_lock:
            lost = fold.skip_to(first_readable)
            self._version += 1
        self.records_lost += lost
        logger.warning("%d %s records of %s were removed before this broker applied them "
                       "(retention); the state they changed keeps its older value", lost,
                       self.kind, self.topic)
        return fold

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
        """Write the snapshot file (with the log position of its last record) and keep it as
        a restore point for a rollback."""
        with self._flush_lock:
            with self._state_lock:
                version = self._version
                if version == self._flushed_version:
                    return
                position = self._applied_log_position
                payload = json.dumps({**self._fold.to_json(),
                                      "applied_log_position": position}).encode()
            atomic_write_bytes(self._path, payload)
            self._flushed_version = version
            point = _RestorePoint(position, payload)
            self._restore_points.append(point)
            if position < self._store.confirm_log_position:
                self._confirmed_point = point

"""Consumer-group offsets kept in the replica set's CommitLog, so a failover never loses one.

Why (issue 18, chaos finding 1): a commit used to be answered once it was in the master's
consumerOffset.json; slaves got the file with the topics at most every haMetadataSyncInterval,
so a slave elected before the next sync served older offsets, and a cut-off master kept
accepting commits that the new master never saw (seed 7: 55 regressions in one partition).
Now an offset commit is a message (Kafka's __consumer_offsets), with the pure fold in
ha/broker/offset_table.py:

    commit_offset / delete_group (master)
        one record in OFFSETS_TOPIC queue 0, written by Replication.put like any message:
        needAckNums, the SyncStateSet, fencing and the master lease all apply, so a deposed,
        paused or cut-off master cannot acknowledge one (its put fails like any put)
        PUT_OK -> applied to the table -> answered OK
        stored but not PUT_OK -> answered with that status (the commit may or may not stay:
        the record is "pending" and is applied, in log order, once a later record is PUT_OK,
        which means every byte before it is on the quorum too)
    every replica (catch_up: every CATCH_UP_INTERVAL_MS, and before each read)
        applies the records below its confirm position, which a failover never truncates
    take-over (Replication.become_master, before the fence lifts)
        applies every record up to the log's end (the confirm position was raised there)
    consumerOffset.json
        a snapshot: the table and the queue offset of OFFSETS_TOPIC it covers, written every
        flushConsumerOffsetInterval when it changed, and at close; a restart replays from it

Order: `_write_lock` is held from a commit's put to its apply (and by catch-up and take-over),
so the records are applied in queue-offset order, the order every replica replays them in.
Reads (`query`, `snapshot`) take only `_state_lock`, never waiting behind a put.

Records that retention removed before this replica applied them (a replica that joined with
`reset_to`, or was down past fileReservedTime): a slave takes the master's snapshot, which
travels with the topics in the HA metadata (`metadata_json` / `note_master_snapshot`); a
take-over that still finds them gone skips them with a WARNING.
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
from typing import Any

from ha.broker.offset_table import (
    GROUPS_MAX,
    OFFSETS_TOPIC,
    OffsetTable,
    encode_commit,
    encode_delete_group,
)
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

__all__ = ["OFFSETS_TOPIC", "OffsetLimitError", "OffsetLog"]

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "consumerOffset.json"
CATCH_UP_INTERVAL_MS = 1000  # a replica applies newly confirmed records this often
CATCH_UP_MESSAGES = 1024  # records per read of OFFSETS_TOPIC
CATCH_UP_BYTES_MAX = 4 << 20
CATCH_UP_READS_MAX = 1 << 20  # bounds one catch-up (1G records)
PENDING_RECORDS_MAX = 10_000  # written, not yet acknowledged: past this, commits are refused
CONFIRM_POLL_MS = 5  # the rare wait for earlier records to be confirmed polls this often


class OffsetLimitError(Exception):
    """A commit refused before anything was written (too many groups, or unacknowledged
    records piling up on a master that cannot reach its quorum)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Pending:
    queue_offset: int
    log_position: int
    body: bytes


class OffsetLog:
    """The consumer-group offsets of one broker (see the module docstring)."""

    def __init__(self, config_dir: Path, store: MessageStore, *, flush_interval_ms: int,
                 put: Callable[[MessageBatch], PutResult], write_timeout_ms: int) -> None:
        self._path = config_dir / SNAPSHOT_FILE
        config_dir.mkdir(parents=True, exist_ok=True)
        self._store = store
        self._put = put
        self._flush_interval_s = flush_interval_ms / 1000.0
        self._write_timeout_s = write_timeout_ms / 1000.0
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._table = self._load()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._master_snapshot: OffsetTable | None = None  # from the HA metadata (a slave)
        self._version = 0  # bumped by every change of the table
        self._flushed_version = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="offset-log", daemon=True)
        self.records_written = 0
        self.records_applied = 0
        self.records_lost = 0  # removed by retention before this replica applied them

    def start(self) -> OffsetLog:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._flush_snapshot()

    def _load(self) -> OffsetTable:
        if not self._path.exists():
            return OffsetTable()
        try:
            return OffsetTable.from_json(json.loads(self._path.read_text()))
        except (ValueError, TypeError, RecursionError) as err:  # written atomically: unlikely
            logger.warning("%s is unreadable (%.200s): replaying every offset record",
                           self._path, err)
            return OffsetTable()

    # -- writes (master) --------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> PutResult:
        """Write and apply one commit; PUT_OK means it survives any failover the put rules
        cover. Raises OffsetLimitError before writing, or what the put raises (NOT_MASTER)."""
        with self._state_lock:
            if group not in self._table.offsets and len(self._table.offsets) >= GROUPS_MAX:
                raise OffsetLimitError(f"more than {GROUPS_MAX} consumer groups")
        return self._write(encode_commit(group, topic, queue_id, queue_offset))

    def delete_group(self, group: str) -> PutResult | None:
        """Write and apply a delete of `group`'s offsets (None: the group has none)."""
        with self._state_lock:
            if group not in self._table.offsets:
                return None
        return self._write(encode_delete_group(group))

    def _write(self, body: bytes) -> PutResult:
        with self._write_lock:
            if len(self._pending) >= PENDING_RECORDS_MAX:
                raise OffsetLimitError(f"{len(self._pending)} offset records are waiting for "
                                       "the quorum (pendingRecordsMax): commits paused")
            result = self._put(MessageBatch(topic=OFFSETS_TOPIC, bodies=[body], queue_ids=[0],
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
                    "earlier offset records were not confirmed in time; this one is kept and "
                    "applied with them"))
            return result

    def _apply_pending(self, queue_offset: int) -> bool:
        """Apply every pending record up to `queue_offset` (just acknowledged: the quorum
        holds every byte before it too). Records this process did not write or lost track of
        (a restart, a put cut short by an error) are read from the log once the confirm
        position reaches the first pending record. False: it did not within the write
        timeout (the records stay pending)."""
        self._drop_applied_pending()
        if self._pending and self._pending[0].queue_offset > self._table.applied_queue_offset:
            first = self._pending[0].log_position
            deadline = time.monotonic() + self._write_timeout_s
            while self._store.confirm_log_position < first:
                if time.monotonic() >= deadline or self._stopping.is_set():
                    return False
                time.sleep(CONFIRM_POLL_MS / 1000.0)  # rare: see the docstring
            self._catch_up_locked(take_over=False)
            self._drop_applied_pending()
            if self._pending and \
                    self._pending[0].queue_offset > self._table.applied_queue_offset:
                return False
        while self._pending and self._pending[0].queue_offset <= queue_offset:
            pending = self._pending.popleft()
            self._apply(pending.queue_offset, pending.body)
        return self._table.applied_queue_offset > queue_offset

    def _drop_applied_pending(self) -> None:
        applied = self._table.applied_queue_offset
        while self._pending and self._pending[0].queue_offset < applied:
            self._pending.popleft()

    def _apply(self, queue_offset: int, body: bytes) -> None:
        with self._state_lock:
            record = self._table.apply(queue_offset, body)
            self._version += 1
        self.records_applied += 1
        if record is None:
            logger.warning("skipped offset record %d of %s: not a valid offset record",
                           queue_offset, OFFSETS_TOPIC)

    # -- replay (every replica) -------------------------------------------------------------
    def catch_up(self, *, wait: bool = True) -> None:
        """Apply the records confirmed since the last pass (wait=False: skip the pass when a
        commit or another pass holds the write lock)."""
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
            end = self._store.max_queue_offset(OFFSETS_TOPIC, 0)
            if self._table.applied_queue_offset > end:  # the table has records the log lacks
                logger.warning("the offset table covers %d records of %s, the log %d: the "
                               "next record is %d (the table keeps what it applied)",
                               self._table.applied_queue_offset, OFFSETS_TOPIC, end, end)
                with self._state_lock:
                    self._table.applied_queue_offset = end
                    self._version += 1

    def _catch_up_locked(self, *, take_over: bool) -> None:
        store = self._store
        for _ in range(CATCH_UP_READS_MAX):
            applied = self._table.applied_queue_offset
            result = store.get_messages(OFFSETS_TOPIC, 0, applied, max_count=CATCH_UP_MESSAGES,
                                        max_bytes=CATCH_UP_BYTES_MAX)
            if result.records:
                for raw in result.records:
                    self._apply_raw(raw)
                continue
            if result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE or \
                    applied >= result.min_queue_offset:
                return  # nothing new (or the table is ahead of the log: take_over sees it)
            if not self._records_gone(result.min_queue_offset, take_over=take_over):
                return

    def _apply_raw(self, raw: bytes) -> None:
        applied = self._table.applied_queue_offset
        try:
            message = decode_record(raw)
        except CorruptRecordError as err:  # the read verified it; count it, never stop here
            logger.warning("offset record %d of %s does not decode: %s", applied,
                           OFFSETS_TOPIC, err)
            self._apply(applied, b"")
            return
        if message.queue_offset != applied:
            logger.warning("offset record at queue offset %d where %d was expected",
                           message.queue_offset, applied)
            if message.queue_offset < applied:
                return
            with self._state_lock:
                self._table.skip_to(message.queue_offset)
        self._apply(message.queue_offset, message.body)

    def _records_gone(self, first_readable: int, *, take_over: bool) -> bool:
        """Records [applied, first_readable) are gone from this log. True: the table moved on
        (the master's snapshot, or a take-over skipping them); False: wait for the snapshot."""
        snapshot = self._master_snapshot
        if snapshot is not None and snapshot.applied_queue_offset > \
                self._table.applied_queue_offset:
            logger.info("offset records before %d are gone here: taking the master's offsets "
                        "(up to record %d)", first_readable, snapshot.applied_queue_offset)
            with self._state_lock:
                self._table = OffsetTable(snapshot.copy_offsets(), snapshot.applied_queue_offset)
                self._version += 1
            self._master_snapshot = None
            return True
        if not take_over:
            return False
        with self._state_lock:
            lost = self._table.skip_to(first_readable)
            self._version += 1
        self.records_lost += lost
        logger.warning("%d offset records of %s were removed before this broker applied them "
                       "(retention); the groups they moved keep older offsets", lost,
                       OFFSETS_TOPIC)
        return True

    # -- HA metadata ------------------------------------------------------------------------
    def metadata_json(self) -> dict[str, Any]:
        """What a master ships to its slaves with the topics (only used by a slave missing
        records that retention removed)."""
        with self._state_lock:
            return {"offsets": self._table.copy_offsets(),
                    "offsets_applied_queue_offset": self._table.applied_queue_offset}

    def note_master_snapshot(self, decoded: dict[str, Any]) -> None:
        """A slave: keep the master's offsets (TypeError/ValueError: malformed)."""
        self._master_snapshot = OffsetTable.from_json({
            "offsets": decoded.get("offsets", {}),
            "applied_queue_offset": decoded.get("offsets_applied_queue_offset", 0)})

    # -- reads ------------------------------------------------------------------------------
    def query(self, group: str, topic: str) -> dict[str, int]:
        self.catch_up(wait=False)
        with self._state_lock:
            return self._table.query(group, topic)

    def snapshot(self) -> dict[str, dict[str, dict[str, int]]]:
        self.catch_up(wait=False)
        with self._state_lock:
            return self._table.copy_offsets()

    def groups(self) -> list[str]:
        with self._state_lock:
            return sorted(self._table.offsets)

    @property
    def applied_queue_offset(self) -> int:
        return self._table.applied_queue_offset

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
                logger.warning("offset catch-up or snapshot failed: %s", err)

    def _flush_snapshot(self) -> None:
        with self._state_lock:
            version = self._version
            if version == self._flushed_version:
                return
            payload = json.dumps(self._table.to_json()).encode()
        atomic_write_bytes(self._path, payload)
        self._flushed_version = version

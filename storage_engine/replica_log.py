"""The store's replication surface: what ha/ uses to ship and apply CommitLog bytes.

`ReplicaLog` works on the store's shared state (store_state: lock, CommitLog, ConsumeQueues,
dispatch cursor) and writes its checkpoint (store_recovery); MessageStore owns one and exposes
its methods. The master reads raw bytes (`read_log`), a slave appends them at the same log
positions (`append_replicated`, which may end inside a record: batches are cut by size, not by
record), acks, then indexes the complete records (`dispatch_replicated`, from the dispatch
cursor: single-topic runs in bulk through record_runs; the rest, and a handful of records such
as one put's, one by one), and truncates at a fork point (`truncate_to`, never below the
confirm position) or restarts empty past a far-ahead master's minimum (`reset_to`).
"""

from __future__ import annotations

import logging

import numpy as np

from storage_engine.consume_queue import CONSUME_QUEUE_ENTRY
from storage_engine.errors import (
    CorruptRecordError,
    InvalidNameError,
    QueueOffsetsError,
    ReplicatedDataError,
    StorageError,
    TruncateBelowConfirmError,
)
from storage_engine.files import make_dirs_durable
from storage_engine.record_runs import (
    RecordRun,
    group_entries,
    last_put_end,
    last_put_end_few,
    scan_run,
    walk_few,
    walk_records,
)
from storage_engine.store_recovery import write_checkpoint
from storage_engine.store_state import StoreState

__all__ = ["BULK_RECORDS_MIN", "ReplicaLog"]

logger = logging.getLogger("storage_engine.message_store")

BULK_RECORDS_MIN = 8  # shorter same-topic runs of replicated records are indexed one by one
INDEX_CUTS_KEPT = 64  # cut positions remembered for `lowest_cut_since`


class ReplicaLog:
    """Replication methods of one store's state."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._lock = state.lock
        self._commit_log = state.commit_log
        # Times a truncation or reset removed indexed records since open: what is derived from
        # the queues (a slave's idempotence table, the system-log folds) is stale when this
        # changed; `lowest_cut_since` says from where.
        self.index_cuts = 0
        self._index_cut_positions: tuple[int, ...] = ()  # the log position of each cut

    def read_log(self, log_position: int, size_bytes_max: int) -> bytes:
        """Raw CommitLog bytes from `log_position` (within one segment)."""
        return self._commit_log.read_raw(log_position, size_bytes_max)

    def append_replicated(self, log_position: int, data: bytes | memoryview) -> None:
        """Append bytes shipped from the master at the same log positions (physical
        replication). `data` may end inside a record; `dispatch_replicated` indexes the complete
        ones. Raises StorageError when `log_position` is not the log's end."""
        with self._lock, self._state.fail_stop():
            self._state.check_writable()
            if (self._commit_log.log_position_end == 0 and not self._commit_log.segments
                    and log_position):
                self._commit_log.start_at(log_position)
                self._state.dispatched = self._state.put_end = log_position
            start = self._commit_log.log_position_end
            if log_position != start:
                raise StorageError(f"replicated data at {log_position}, log ends at {start}")
            self._commit_log.append_raw(log_position, data)

    def dispatch_replicated(self) -> int:
        """Index the complete records appended since the last call; returns how many.
        Single-topic runs take the bulk path (record_runs), others the per-record one.

        Raises ReplicatedDataError when the master's bytes do not hold valid records (a bad
        length, magic code or topic name): the log is cut back to the end of the last good
        record (unless that is below the confirm position), so nothing unindexable stays.
        Queue offsets that do not continue their queue raise QueueOffsetsError and cut nothing
        (the records themselves are well formed: the link ends, as before)."""
        with self._lock, self._state.fail_stop():
            try:
                return self._dispatch_replicated()
            except (CorruptRecordError, InvalidNameError) as err:
                bad = self._state.dispatched
                if isinstance(err, CorruptRecordError) and err.log_position >= 0:
                    bad = max(bad, err.log_position)
                cut = bad >= self._state.confirm
                if cut:
                    self.truncate_to(bad)
                reason = err.reason if isinstance(err, CorruptRecordError) else str(err)
                raise ReplicatedDataError(
                    f"{reason} (replicated record; "
                    f"{'cut there' if cut else 'below the confirm position: kept'})",
                    log_position=bad) from err

    def _dispatch_replicated(self) -> int:
        state = self._state
        count = 0
        with self._lock:
            end = self._commit_log.log_position_end
            while state.dispatched < end:
                segment = self._commit_log.segment_for(state.dispatched)
                base = segment.base_position
                start, stop = state.dispatched - base, min(segment.size_bytes, end - base)
                try:
                    few = walk_few(segment.map, start, stop, BULK_RECORDS_MIN)
                    if few is None:
                        positions, sizes, stop, blank = walk_records(segment.map, start, stop)
                    else:
                        found, stop, blank = few
                except CorruptRecordError as err:
                    raise CorruptRecordError(err.reason, log_position=base + err.log_position
                                             ) from err
                if few is not None:  # a handful of records (one put's): one by one
                    if found:
                        count += state.dispatch_refs(self._commit_log.iter_records(
                            base + start, base + stop))
                        put_end = last_put_end_few(segment.map, start, found)
                        if put_end >= 0:
                            state.put_end = base + put_end
                elif len(positions):
                    count += self._dispatch_run(segment.map, positions, sizes, base)
                    put_end = last_put_end(segment.map, positions, sizes)
                    if put_end >= 0:
                        state.put_end = base + put_end
                segment_end = base + segment.size_bytes
                if not blank or segment_end > end:
                    state.dispatched = base + stop
                    break
                if state.put_end == base + stop:  # a sealed segment ends its last put
                    state.put_end = segment_end
                state.dispatched = segment_end
        return count

    def _dispatch_run(self, data: object, positions: np.ndarray, sizes: np.ndarray,
                      base: int) -> int:
        """Index complete records in bulk, one leading same-topic run at a time."""
        done = 0
        while done < len(positions):
            try:
                run = scan_run(data, positions[done:], sizes[done:], base)
            except CorruptRecordError as err:
                raise CorruptRecordError(err.reason, log_position=base + err.log_position
                                         ) from err
            if len(run.log_positions) >= BULK_RECORDS_MIN:
                self._dispatch_record_run(run)
                done += len(run.log_positions)
                continue
            # Interleaved topics: the next records one by one (bulk set-up would cost more).
            end = min(done + BULK_RECORDS_MIN * 8, len(positions))
            self._state.dispatch_refs(self._commit_log.iter_records(
                base + int(positions[done]), base + int(positions[end - 1] + sizes[end - 1])))
            done = end
        return done

    def _dispatch_record_run(self, run: RecordRun) -> None:
        offsets_of = self._state.next_queue_offsets.setdefault(run.topic, {})
        for queue_id, queue_offsets, entries in group_entries(run):
            queue = self._state.consume_queue(run.topic, queue_id)
            expected = queue.max_queue_offset
            fresh = queue_offsets >= expected
            if not fresh.all():  # already indexed (recovery rebuilt them)
                queue_offsets = queue_offsets[fresh]
                entries = entries.reshape(-1, CONSUME_QUEUE_ENTRY.size)[fresh].reshape(-1)
                if not len(queue_offsets):
                    continue
            first_offset = int(queue_offsets[0])
            if first_offset > expected and queue.max_queue_offset > queue.min_queue_offset:
                raise QueueOffsetsError(f"consume queue {run.topic}/{queue_id} ends at {expected} "
                                   f"but replicated records start at queue_offset "
                                   f"{first_offset}")
            if not (np.diff(queue_offsets) == 1).all():
                raise QueueOffsetsError(f"queue offsets of {run.topic}/{queue_id} are not "
                                   f"contiguous in replicated records from {first_offset}")
            queue.append(first_offset, entries.tobytes())
            offsets_of[queue_id] = first_offset + len(queue_offsets)

    def truncate_to(self, log_position: int) -> None:
        """Cut the log (and its index and epochs) at `log_position`, crash-safely.

        Raises TruncateBelowConfirmError below the confirm position (docs/design.md §5.5)."""
        state = self._state
        with self._lock, state.fail_stop():
            pending = state.truncate_intent >= 0  # a cut that failed half way: finish it too
            if pending:
                log_position = min(log_position, state.truncate_intent)
            if log_position < state.confirm:
                raise TruncateBelowConfirmError(log_position, state.confirm)
            if log_position >= self._commit_log.log_position_end and not pending:
                return
            # Indexed records go: derived state is stale. Noted before and again after the cut:
            # a reader of the queues that started its pass in between (it saw the first note)
            # may have read records being cut, and sees the second one at its next pass.
            cuts_indexed = log_position < state.dispatched
            if cuts_indexed:
                self._note_index_cut(log_position)
            # Carried in the state, not passed: a flush-thread checkpoint written before the
            # cut is done keeps it too (store_state), and so do later ones if the cut fails.
            state.truncate_intent = log_position
            write_checkpoint(state)
            self._commit_log.truncate_to(log_position)
            for queue in state.queues.values():
                queue.truncate_from_log_position(log_position)
            state.next_queue_offsets.clear()
            state.dispatched = min(state.dispatched, log_position)
            if state.put_end is not None and state.put_end > log_position:
                state.put_end = None
            state.epochs.truncate_from(log_position)
            state.truncate_intent = -1
            write_checkpoint(state)
            if cuts_indexed:
                self._note_index_cut(log_position)
            logger.warning("truncated the log to log_position %d", log_position)

    def _note_index_cut(self, log_position: int) -> None:
        self._index_cut_positions = (*self._index_cut_positions[-(INDEX_CUTS_KEPT - 1):],
                                     log_position)
        self.index_cuts += 1

    def lowest_cut_since(self, seen_cuts: int) -> int | None:
        """The lowest log position at which indexed records were cut since the store had made
        `seen_cuts` cuts (`index_cuts` then), or None when none was. State derived from records
        at or past it is stale; what was derived from earlier records still holds. 0 when the
        cuts since are too many to say (everything is stale)."""
        with self._lock:
            since = self.index_cuts - seen_cuts
            if since <= 0:
                return None
            if since > len(self._index_cut_positions):
                return 0
            return min(self._index_cut_positions[-since:])

    def truncate_incomplete_tail(self) -> None:
        """Cut what follows the complete data (`complete_log_position_end`)."""
        with self._lock:
            self.cut_tail(self.complete_log_position_end())

    def complete_log_position_end(self) -> int:
        """Where the data a take-over keeps ends (indexes what was appended first); it cuts
        there with `cut_tail` (ha/replication/takeover_core.py).

        A replica's log can end inside a record (transfers are cut by size) and inside a put
        (the master died between two transfers). The end of the last whole put, unless the
        confirm position is past it: then a reader may have seen part of that put, so it stays
        and only a partial record goes (the producer's retry of the put may then store its
        first rows twice: at least once, never lost)."""
        with self._lock:
            self.dispatch_replicated()
            if self._state.put_end is None:
                self._state.put_end = self._last_put_end_at_or_below(self._state.dispatched)
            if self._state.confirm <= self._state.put_end:
                return self._state.put_end
            return self._state.dispatched

    def _last_put_end_at_or_below(self, log_position: int) -> int:
        """The end of the last whole put at or below `log_position` (a record boundary), by
        walking the records of its segment from the segment's start: a put that fits a segment
        starts in it (CommitLog.append_batch), so a segment's start ends a put. (A put larger
        than a segment spans segments; then this is the segment's start, inside that put.)"""
        log = self._commit_log
        if log_position <= log.min_log_position or not log.segments:
            return log_position
        segment = log.segment_for(log_position - 1)
        base = segment.base_position
        positions, sizes, _, blank = walk_records(segment.map, 0, log_position - base)
        if blank and log_position == base + segment.size_bytes:
            return log_position  # the segment is sealed: the next one starts a put
        end = last_put_end(segment.map, positions, sizes)
        return base if end < 0 else base + end

    def cut_tail(self, log_position: int) -> None:
        """Cut the bytes of a partial put or record from `log_position`, where the complete
        data ends (`complete_log_position_end`); the confirm position comes down to it if
        above."""
        with self._lock:
            if log_position > self._state.dispatched:
                raise StorageError(f"cut_tail({log_position}): complete records end at "
                                   f"{self._state.dispatched}")
            if log_position < self._commit_log.log_position_end:
                self._state.confirm = min(self._state.confirm, log_position)
                self.truncate_to(log_position)

    def reset_to(self, log_position: int) -> None:
        """Drop the whole log (segments, ConsumeQueues, epochs) and start it empty at
        `log_position`, a segment boundary at or past the log's end: a replica so far behind
        that its master no longer holds the bytes it would need next.

        Crash-safe: segments go newest first, so a crash leaves a prefix of the old log (the
        next handshake decides again); ConsumeQueues are rebuilt against what remains."""
        state = self._state
        with self._lock, state.fail_stop():
            end = self._commit_log.log_position_end
            if log_position < end or log_position % self._commit_log.segment_size_bytes:
                raise StorageError(f"reset_to({log_position}): must be a segment boundary at "
                                   f"or past the log's end {end}")
            self._commit_log.delete_all()
            for queue in state.queues.values():
                queue.delete_all()
            state.queues.clear()
            state.next_queue_offsets.clear()
            with state.directory_syncs.removing:  # (files.PendingDirectorySyncs)
                state.fs.remove_tree(state.store_dir / "consumequeue")
            make_dirs_durable(state.store_dir / "consumequeue", state.fs)
            state.epochs.truncate_from(-1)
            self._note_index_cut(0)
            self._commit_log.start_at(log_position)
            state.dispatched = state.confirm = state.put_end = log_position
            write_checkpoint(state)
            logger.warning("log dropped; it restarts empty at log_position %d", log_position)

"""The store's replication surface: what ha/ uses to ship and apply CommitLog bytes.

A mixin of MessageStore (it shares the store's lock, CommitLog, ConsumeQueues, dispatch cursor
and checkpoint; see message_store's module docstring for the replica path): the master reads raw
bytes (`read_log`), a slave appends them at the same log positions (`append_replicated`, which may
end inside a record), indexes the complete records (`dispatch_replicated`: single-topic runs in
bulk through record_runs; the rest, and a handful of records such as one put's, one by one),
and truncates at a fork point (`truncate_to`, never below the confirm position) or restarts
empty past a far-ahead master's minimum (`reset_to`).
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

__all__ = ["BULK_RECORDS_MIN", "ReplicaLogMixin"]

logger = logging.getLogger("storage_engine.message_store")

BULK_RECORDS_MIN = 8  # shorter same-topic runs of replicated records are indexed one by one
INDEX_CUTS_KEPT = 64  # cut positions remembered for `lowest_cut_since`


class ReplicaLogMixin:
    """Replication methods of MessageStore (not usable on its own)."""

    # Times a truncation or reset removed indexed records since open: what is derived from the
    # queues (a slave's idempotence table, the system-log folds) is stale when this changed;
    # `lowest_cut_since` says from where.
    index_cuts = 0
    _index_cut_positions: tuple[int, ...] = ()  # the log position of each of those cuts
    # Where the last whole put among the indexed records ends (<= _dispatched); None: not
    # known yet (after open, or a truncation inside a put), found by a walk when needed.
    _put_end: int | None = None

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
        return self._dispatched

    def read_log(self, log_position: int, size_bytes_max: int) -> bytes:
        """Raw CommitLog bytes from `log_position` (within one segment)."""
        return self._commit_log.read_raw(log_position, size_bytes_max)

    def append_replicated(self, log_position: int, data: bytes | memoryview) -> None:
        """Append bytes shipped from the master at the same log positions (physical
        replication). `data` may end inside a record; `dispatch_replicated` indexes the complete
        ones. Raises StorageError when `log_position` is not the log's end."""
        with self._lock, self._fail_stop():
            if self._closed:
                raise StorageError("store is closed")
            if self._fsync_failed is not None:
                raise StorageError(f"stopped after a failed fsync: {self._fsync_failed}")
            if (self._commit_log.log_position_end == 0 and not self._commit_log.segments
                    and log_position):
                self._commit_log.start_at(log_position)
                self._dispatched = self._put_end = log_position
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
        with self._lock, self._fail_stop():
            try:
                return self._dispatch_replicated()
            except (CorruptRecordError, InvalidNameError) as err:
                bad = self._dispatched
                if isinstance(err, CorruptRecordError) and err.log_position >= 0:
                    bad = max(bad, err.log_position)
                cut = bad >= self._confirm
                if cut:
                    self.truncate_to(bad)
                reason = err.reason if isinstance(err, CorruptRecordError) else str(err)
                raise ReplicatedDataError(
                    f"{reason} (replicated record; "
                    f"{'cut there' if cut else 'below the confirm position: kept'})",
                    log_position=bad) from err

    def _dispatch_replicated(self) -> int:
        count = 0
        with self._lock:
            end = self._commit_log.log_position_end
            while self._dispatched < end:
                segment = self._commit_log.segment_for(self._dispatched)
                base = segment.base_position
                start, stop = self._dispatched - base, min(segment.size_bytes, end - base)
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
                        count += self._dispatch_refs(self._commit_log.iter_records(
                            base + start, base + stop))
                        put_end = last_put_end_few(segment.map, start, found)
                        if put_end >= 0:
                            self._put_end = base + put_end
                elif len(positions):
                    count += self._dispatch_run(segment.map, positions, sizes, base)
                    put_end = last_put_end(segment.map, positions, sizes)
                    if put_end >= 0:
                        self._put_end = base + put_end
                segment_end = base + segment.size_bytes
                if not blank or segment_end > end:
                    self._dispatched = base + stop
                    break
                if self._put_end == base + stop:  # a sealed segment ends its last put
                    self._put_end = segment_end
                self._dispatched = segment_end
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
            self._dispatch_refs(self._commit_log.iter_records(
                base + int(positions[done]), base + int(positions[end - 1] + sizes[end - 1])))
            done = end
        return done

    def _dispatch_record_run(self, run: RecordRun) -> None:
        offsets_of = self._next_queue_offsets.setdefault(run.topic, {})
        for queue_id, queue_offsets, entries in group_entries(run):
            queue = self._consume_queue(run.topic, queue_id)
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

        Raises TruncateBelowConfirmError below the confirm position (DESIGN.md §5.5)."""
        with self._lock, self._fail_stop():
            if log_position < self._confirm:
                raise TruncateBelowConfirmError(log_position, self._confirm)
            if log_position >= self._commit_log.log_position_end:
                return
            # Indexed records go: derived state is stale. Noted before and again after the cut:
            # a reader of the queues that started its pass in between (it saw the first note)
            # may have read records being cut, and sees the second one at its next pass.
            cuts_indexed = log_position < self._dispatched
            if cuts_indexed:
                self._note_index_cut(log_position)
            self._write_checkpoint(intent=log_position)
            self._commit_log.truncate_to(log_position)
            for queue in self._queues.values():
                queue.truncate_from_log_position(log_position)
            self._next_queue_offsets.clear()
            self._dispatched = min(self._dispatched, log_position)
            if self._put_end is not None and self._put_end > log_position:
                self._put_end = None
            self.epochs.truncate_from(log_position)
            self._write_checkpoint()
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
            if self._put_end is None:
                self._put_end = self._last_put_end_at_or_below(self._dispatched)
            if self._confirm <= self._put_end:
                return self._put_end
            return self._dispatched

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
            if log_position > self._dispatched:
                raise StorageError(f"cut_tail({log_position}): complete records end at "
                                   f"{self._dispatched}")
            if log_position < self._commit_log.log_position_end:
                self._confirm = min(self._confirm, log_position)
                self.truncate_to(log_position)

    def reset_to(self, log_position: int) -> None:
        """Drop the whole log (segments, ConsumeQueues, epochs) and start it empty at
        `log_position`, a segment boundary at or past the log's end: a replica so far behind
        that its master no longer holds the bytes it would need next.

        Crash-safe: segments go newest first, so a crash leaves a prefix of the old log (the
        next handshake decides again); ConsumeQueues are rebuilt against what remains."""
        with self._lock, self._fail_stop():
            end = self._commit_log.log_position_end
            if log_position < end or log_position % self._commit_log.segment_size_bytes:
                raise StorageError(f"reset_to({log_position}): must be a segment boundary at "
                                   f"or past the log's end {end}")
            self._commit_log.delete_all()
            for queue in self._queues.values():
                queue.delete_all()
            self._queues.clear()
            self._next_queue_offsets.clear()
            self.fs.remove_tree(self.store_dir / "consumequeue")
            make_dirs_durable(self.store_dir / "consumequeue", self.fs)
            self.epochs.truncate_from(-1)
            self._note_index_cut(0)
            self._commit_log.start_at(log_position)
            self._dispatched = self._confirm = self._put_end = log_position
            self._write_checkpoint()
            logger.warning("log dropped; it restarts empty at log_position %d", log_position)

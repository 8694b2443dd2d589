"""Opening a store after a clean shutdown or a crash, and the checkpoint that says how much of
it the next open may trust.

Recovery (`recover`, on open): redo an interrupted truncation, check the CommitLog from the last
checkpoint's position (what it vouches for was fsynced: CommitLog.recover says why that is
enough) and cut at the first invalid record, trim ConsumeQueue entries past that
end, rebuild the entries the checkpoint does not vouch for by parsing the CommitLog, and
recompute next offsets. Whether the last run ended cleanly comes from the abort marker
(checkpoint.DirectoryLock, taken by MessageStore) and from the checkpoint being readable.

The checkpoint (`write_checkpoint`) is written here too because its fields are exactly what
recovery trusts: `consume_queue_log_position` = min(dispatched, flushed) is the point below
which `_load_consume_queues` keeps index entries; `truncate_intent_log_position` is what
`recover` redoes. A replica's dispatch cursor can lag its appended bytes (replica_log), so the
checkpoint vouches for ConsumeQueues only up to that cursor, and recovery rebuilds the rest and
cuts a partial record at the end.
"""

from __future__ import annotations

import dataclasses
import logging

from storage_engine.checkpoint import Checkpoint, read_checkpoint
from storage_engine.checkpoint import write_checkpoint as write_checkpoint_file
from storage_engine.commit_log import RecoveryScan
from storage_engine.consume_queue import ConsumeQueue
from storage_engine.errors import CorruptFileError
from storage_engine.files import make_dirs_durable
from storage_engine.names import QUEUE_ID_MAX, topic_name_error
from storage_engine.record_format import HEADER
from storage_engine.store_state import StoreState

__all__ = ["Recovered", "recover", "write_checkpoint"]

logger = logging.getLogger("storage_engine.message_store")


@dataclasses.dataclass(frozen=True, slots=True)
class Recovered:
    scan: RecoveryScan
    checkpoint_corrupt: bool  # unreadable checkpoint: recovered from the start of the log


def recover(state: StoreState) -> Recovered:
    """Bring the CommitLog, ConsumeQueues, epochs and positions of a just-opened store to a
    consistent state, then flush and write a fresh checkpoint (not clean: the store is open)."""
    corrupt = False
    try:
        checkpoint = read_checkpoint(state.store_dir / "checkpoint", state.fs) or Checkpoint(
            clean_shutdown=True)
    except CorruptFileError as err:
        logger.warning("%s; recovering from the start of the log", err)
        checkpoint = Checkpoint()
        corrupt = True
    commit_log = state.commit_log
    if checkpoint.truncate_intent_log_position >= 0:
        logger.warning("redoing an interrupted truncation to log_position %d",
                       checkpoint.truncate_intent_log_position)
        commit_log.discard_from(checkpoint.truncate_intent_log_position)
    scan_from = min(checkpoint.consume_queue_log_position, checkpoint.flushed_log_position)
    if checkpoint.truncate_intent_log_position >= 0:  # the log now ends there
        scan_from = min(scan_from, checkpoint.truncate_intent_log_position)
    scan = commit_log.recover(scan_from)
    end = scan.valid_log_position_end
    if scan.cut_bytes:
        logger.warning("recovery cut %d bytes after log_position %d (%s)",
                       scan.cut_bytes, end, scan.reason)
    # the scan starts below the checkpoint only when the checkpoint is not a record boundary
    # (CommitLog.recover): its ConsumeQueue position is then not trusted either
    redispatch_from = max(min(checkpoint.consume_queue_log_position, end,
                              scan.scanned_from_log_position), commit_log.min_log_position)
    _load_consume_queues(state, redispatch_from, end)
    state.dispatch_refs(commit_log.iter_records(redispatch_from, end))
    state.dispatched = end
    state.epochs.truncate_from(end + 1)
    confirm = checkpoint.confirm_log_position
    if state.auto_confirm:
        confirm = end
    state.confirm = min(max(confirm, commit_log.min_log_position), end)
    commit_log.flush()
    write_checkpoint(state)
    return Recovered(scan, corrupt)


def release_cold_pages(state: StoreState, queues: list[ConsumeQueue]) -> int:
    """Release the mapped pages of the CommitLog and of `queues` (the ones this checkpoint
    flushed: the queues being written) that are flushed and behind their resident window
    (segment.py: resident pages). A queue nobody writes keeps what a reader faulted in until
    it is written again; the CommitLog's whole cold range goes every time. Returns the bytes
    released."""
    config = state.config
    released = state.commit_log.release_cold_pages(config.commit_log_resident_window_bytes)
    for queue in queues:
        released += queue.release_cold_pages(config.consume_queue_resident_window_bytes)
    return released


def write_checkpoint(state: StoreState, *, clean: bool = False) -> None:
    """Flush the ConsumeQueues and the CommitLog, then record what they hold durably, with the
    truncation not done yet (`state.truncate_intent`, redone by `recover` if cut short).

    Safe from several threads (StoreState says how): the positions are a snapshot under
    `state.lock`; the file is written under `state.checkpoint_lock`, and not at all when a
    later snapshot was written meanwhile (this one's positions may predate a truncation)."""
    state.raise_if_fsync_failed()  # a checkpoint would vouch for pages the kernel may have lost
    with state.fail_stop():
        with state.lock:
            dispatched = state.dispatched
            queues = list(state.unflushed_queues)  # O(written since the last checkpoint)
            confirm = state.confirm
            intent = state.truncate_intent
            state.checkpoints_taken += 1
            taken = state.checkpoints_taken
        state.create_first_segments(queues)  # new queues' files, off the put path
        for queue in queues:
            queue.flush()
        with state.lock:  # a queue leaves the set once flushed and not written since, so a
            for queue in queues:  # checkpoint at the same time flushes it as well
                if queue.flushed:
                    state.unflushed_queues.discard(queue)
        state.directory_syncs.sync_all()  # their new directories and files (files.py)
        flushed = state.commit_log.flush()
        release_cold_pages(state, queues)
        with state.checkpoint_lock:
            if taken < state.checkpoints_written:
                return  # a later snapshot is on disk: this older one must not replace it
            write_checkpoint_file(state.store_dir / "checkpoint", fs=state.fs,
                                  checkpoint=Checkpoint(
                flushed_log_position=flushed,
                consume_queue_log_position=min(dispatched, flushed),
                confirm_log_position=confirm,
                truncate_intent_log_position=intent,
                clean_shutdown=clean,
            ))
            state.checkpoints_written = taken


def _load_consume_queues(state: StoreState, trusted_below: int, log_end: int) -> None:
    """Open every ConsumeQueue and cut it after its last entry that is both verified
    against the recovered CommitLog and below `trusted_below` (the checkpoint's flushed
    dispatch point). Entries past it were not fsynced before a crash and may be torn or
    stale (a lost page can zero half an entry); the dispatcher rebuilds them from the log.
    """
    root = state.store_dir / "consumequeue"
    fs = state.fs
    make_dirs_durable(root, fs)
    for topic in sorted(fs.list_dir(root)):
        topic_dir = root / topic
        if topic_name_error(topic) is not None or not fs.is_dir(topic_dir):
            logger.warning("ignoring %s: not a topic's ConsumeQueue directory", topic_dir)
            continue
        for name in sorted(fs.list_dir(topic_dir)):
            if not name.isdigit() or int(name) > QUEUE_ID_MAX:
                continue
            queue = state.consume_queue(topic, int(name))
            keep = _last_trusted_entry(state, queue, trusted_below, log_end) + 1
            queue.truncate_to_queue_offset(max(keep, queue.min_queue_offset))


def _last_trusted_entry(state: StoreState, queue: ConsumeQueue, trusted_below: int,
                        log_end: int) -> int:
    """Walk back from the queue's end (bounded: entries written since the checkpoint)."""
    topic_meta = state.meta_for(queue.topic)
    queue_offset = queue.max_queue_offset - 1
    while queue_offset >= queue.min_queue_offset:
        entry = queue.entry(queue_offset)
        if entry is not None and entry[0] < trusted_below and _entry_matches(
                state, entry, queue, queue_offset, topic_meta, log_end):
            return queue_offset
        queue_offset -= 1
    return queue_offset


def _entry_matches(state: StoreState, entry: tuple[int, int, int], queue: ConsumeQueue,
                   queue_offset: int, topic_meta: bytes, log_end: int) -> bool:
    log_position, size, _ = entry
    if size < HEADER.size or log_position + size > log_end:
        return False
    header = state.commit_log.read(log_position, HEADER.size)
    if header is None:
        return False
    fields = HEADER.unpack(header)
    if (fields[0], fields[3], fields[5], fields[6]) != (size, queue.queue_id, queue_offset,
                                                         log_position):
        return False
    topic_at = log_position + HEADER.size + fields[14]
    return state.commit_log.read(topic_at, len(topic_meta)) == topic_meta

"""The put path: validate a batch, write its records and their index entries, and keep the
flush and confirm positions.

`append` validates the whole batch (nothing is written when any message is bad), then under
the store's lock assigns queue offsets, encodes and writes the records, and dispatches their
ConsumeQueue entries right after the CommitLog bytes (the index is never ahead of the log).
MessageStore.put_messages adds the durability wait of SYNC_FLUSH (group commit).

Latency: this is the hot path. Work is done per batch (one call of each helper per batch, the
per-row work in C-level maps and joins); the stable collaborators are held directly on the
writer so no row pays for an extra lookup.

Visibility: reads never return a record past the confirm position. A standalone store
(`auto_confirm=True`) confirms what is written (ASYNC_FLUSH) or what is fsynced (SYNC_FLUSH,
in `flush_commit_log`), so a reader never sees a message that a crash could take back; under
replication the master sets it (`set_confirm_log_position`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from storage_engine.consume_queue import CONSUME_QUEUE_ENTRY
from storage_engine.errors import FsyncFailedError
from storage_engine.messages import MessageBatch, PutResult
from storage_engine.names import QUEUE_ID_MAX, topic_name_error
from storage_engine.record_format import (
    PROPERTIES_PAYLOAD_MAX_BYTES,
    encode_host,
    encode_properties,
    java_string_hash,
)
from storage_engine.statuses import PutStatus
from storage_engine.store_state import StoreState

__all__ = ["StoreWriter"]

_BYTES_TYPE = frozenset({bytes})


class StoreWriter:
    """Appends batches and moves the flush and confirm positions of one store's state."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._config = state.config
        self._lock = state.lock
        self._commit_log = state.commit_log
        self._next_queue_offsets = state.next_queue_offsets

    def append(self, batch: MessageBatch) -> PutResult:
        """Write a batch without waiting for durability. Nothing is written when any message
        is invalid (MESSAGE_ILLEGAL / PROPERTIES_SIZE_EXCEEDED with `error` saying why)."""
        invalid = self._validate(batch)
        if invalid is not None:
            return invalid
        properties, error = _encode_properties(batch)
        if error:
            return PutResult(PutStatus.PROPERTIES_SIZE_EXCEEDED, error=error)
        tags_codes = None if batch.tags is None else [
            0 if tag is None else java_string_hash(tag) for tag in batch.tags]
        state = self._state
        with self._lock, state.fail_stop():
            if state.closed:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="store is closed")
            if state.fsync_failed is not None:
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                 error=f"stopped after a failed fsync: {state.fsync_failed}")
            if state.truncate_intent >= 0:  # a cut failed half way (replica_log.truncate_to)
                return PutResult(PutStatus.SERVICE_NOT_AVAILABLE,
                                 error=f"a truncation to log_position {state.truncate_intent} "
                                       "failed half way")
            queue_offsets = self._assign_queue_offsets(batch.topic, batch.queue_ids)
            positions, sizes = self._commit_log.append_batch(
                topic_meta=state.meta_for(batch.topic), bodies=batch.bodies,
                properties=properties, queue_ids=batch.queue_ids, queue_offsets=queue_offsets,
                store_timestamp_ms=state.clock_ms(), store_host=state.store_host,
                born_timestamp_ms=batch.born_timestamp_ms,
                born_host=encode_host(*batch.born_host), flag=batch.flag,
            )
            self._dispatch_placed(
                batch.topic, batch.queue_ids, queue_offsets, positions, sizes, tags_codes)
            end = state.dispatched = state.put_end = self._commit_log.log_position_end
            advanced = state.auto_confirm and not state.sync_flush and end > state.confirm
            if advanced:
                state.confirm = end
        if advanced:
            state.notify_confirm(end)
        return PutResult(
            PutStatus.PUT_OK, log_position_end=end, queue_ids=batch.queue_ids,
            queue_offsets=queue_offsets, log_positions=positions,
        )

    def _validate(self, batch: MessageBatch) -> PutResult | None:
        def illegal(reason: str) -> PutResult:
            return PutResult(PutStatus.MESSAGE_ILLEGAL, error=reason)

        config = self._config
        reason = topic_name_error(batch.topic)
        if reason is not None:
            return illegal(reason)
        count = len(batch.bodies)
        if count == 0 or count > config.batch_messages_max:
            return illegal(f"batch of {count} messages, allowed 1..{config.batch_messages_max}")
        for name in ("queue_ids", "tags", "keys", "properties"):
            column = getattr(batch, name)
            if column is not None and len(column) != count:
                return illegal(f"{name} has {len(column)} entries for {count} bodies")
        if min(batch.queue_ids) < 0 or max(batch.queue_ids) > QUEUE_ID_MAX:
            return illegal(f"queue id outside 0..{QUEUE_ID_MAX}")
        if not set(map(type, batch.bodies)) <= _BYTES_TYPE:
            return illegal("every body must be bytes")
        largest = max(map(len, batch.bodies))
        if largest > config.message_size_max_bytes:
            return illegal(f"body of {largest} bytes exceeds maxMessageSize "
                           f"{config.message_size_max_bytes}")
        return None

    def _assign_queue_offsets(self, topic: str, queue_ids: Sequence[int]) -> Sequence[int]:
        """Take the next queue offsets for a batch (a range when it targets one queue)."""
        offsets = self._next_queue_offsets.get(topic)
        if offsets is None:
            offsets = self._next_queue_offsets[topic] = {}
        first_queue_id = queue_ids[0]
        if queue_ids.count(first_queue_id) == len(queue_ids):
            start = offsets.get(first_queue_id)
            if start is None:
                start = self._state.consume_queue(topic, first_queue_id).max_queue_offset
            offsets[first_queue_id] = start + len(queue_ids)
            return range(start, start + len(queue_ids))
        assigned = []
        consume_queue = self._state.consume_queue
        for queue_id in queue_ids:
            next_offset = offsets.get(queue_id)
            if next_offset is None:
                next_offset = consume_queue(topic, queue_id).max_queue_offset
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
        consume_queue = self._state.consume_queue
        codes = tags_codes if tags_codes is not None else [0] * len(positions)
        if isinstance(queue_offsets, range):  # one queue
            entries = b"".join(list(map(pack, positions, sizes, codes)))
            consume_queue(topic, queue_ids[0]).append(queue_offsets[0], entries)
            return
        grouped: dict[int, tuple[int, list[bytes]]] = {}
        for index, queue_id in enumerate(queue_ids):
            group = grouped.get(queue_id)
            if group is None:
                group = grouped[queue_id] = (queue_offsets[index], [])
            group[1].append(pack(positions[index], sizes[index], codes[index]))
        for queue_id, (first_offset, parts) in grouped.items():
            consume_queue(topic, queue_id).append(first_offset, b"".join(parts))

    # -- flush and confirm bookkeeping ------------------------------------------------------
    def flush_commit_log(self) -> int:
        """fsync the CommitLog (the flush service's and `MessageStore.flush`'s step); under
        SYNC_FLUSH with auto-confirm the confirm position follows. Fail-stop on a failed
        fsync: this and every later flush raise FsyncFailedError."""
        state = self._state
        state.raise_if_fsync_failed()
        try:
            flushed = self._commit_log.flush()
        except FsyncFailedError as err:
            state.fsync_failed = err
            raise
        if state.auto_confirm and state.sync_flush:
            with self._lock:
                advanced = flushed > state.confirm and not state.closed
                if advanced:
                    state.confirm = min(flushed, self._commit_log.log_position_end)
            if advanced:
                state.notify_confirm(flushed)
        return flushed

    def set_confirm_log_position(self, log_position: int) -> None:
        """Replication sets the commit point; it never moves past the log's end (callers
        keep it monotonic: ha/ serialises its updates)."""
        state = self._state
        with self._lock:
            log_position = min(log_position, self._commit_log.log_position_end)
            advanced = log_position > state.confirm
            state.confirm = log_position
        if advanced:
            state.notify_confirm(log_position)


def _encode_properties(batch: MessageBatch) -> tuple[list[bytes] | None, str]:
    """Each row's properties payload (TAGS and KEYS merged in), or why one is too large."""
    if batch.tags is None and batch.keys is None and batch.properties is None:
        return None, ""
    encoded: list[bytes] = []
    count = len(batch.bodies)
    users = batch.properties if batch.properties is not None else itertools.repeat(None, count)
    tags = batch.tags if batch.tags is not None else itertools.repeat(None, count)
    keys = batch.keys if batch.keys is not None else itertools.repeat(None, count)
    for index, (user, tag, key) in enumerate(zip(users, tags, keys, strict=True)):
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

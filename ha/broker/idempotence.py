"""Idempotent produce: drop a batch whose (producer_id, sequence) this broker already stored.

The key travels in the batch's last row as the property IDEMPOTENCE_PROPERTY =
"<producer_id>/<sequence>" (connector/protocol/wire.py). A producer (one Spark write task)
sends sequences 0, 1, 2 ... in order and stops at its first failure, so what a broker stored of
one producer is always a prefix, and "sequence <= last stored" means "already stored".

    IdempotenceTable   pure core: producer_id -> last stored sequence and the places of its
                       last `batches_max` stored batches, least recently used first, at most
                       `producers_max` producers (the window)
    IdempotentPuts     shell: per-producer lock around check -> store -> record, so two
                       attempts of one task (Spark speculation) cannot both store a batch
    rebuild_table()    after a restart: the markers in the last `window_messages` messages of
                       every queue that are younger than `window_ms`, in store order (the
                       window must cover the rows per queue of the largest micro-batch that
                       may be replayed across a broker restart)

Why the last row: a batch is one contiguous CommitLog append, and recovery keeps a prefix of
the log, so if the last record of a batch survived a crash the whole batch did; a marker never
stands for a partly stored batch.

    put(batch) ──no marker──────────────────────────────► store
        │ marker (p, s)
        ▼ lock(p)
    s <= last[p] ? ──yes──► settle(end[p]) ──► reply its status and the original's positions,
        │ no                                      duplicate=true (nothing written)
        ▼
      store ──stored status──► last[p], end[p] = s, log end; place of s ──► reply

Why a duplicate names positions (issue 43): every stored answer says where each row is, a
retry's included, or a producer that records offsets, the proxy's receipts and the checkers
comparing acks with reads get -1. The table keeps the place of each producer's last
`batches_max` batches (Kafka keeps five), O(1) each (ha/broker/batch_places.py); a rebuild
from the log recovers them from the marker records, and a place that does not say the layout
is located in the log. A retry whose positions are gone (older than the kept batches, or no
longer in the log) gets DUPLICATE_POSITION_UNKNOWN instead of PUT_OK: stored earlier, as
durable as a PUT_OK, position unknown. A producer evicted from the window is not recognised
at all (its retry is stored again), as before.

Why a duplicate is settled, not simply answered PUT_OK: "stored" includes FLUSH_SLAVE_TIMEOUT
and SLAVE_NOT_AVAILABLE, i.e. bytes in the master's log that the quorum has not confirmed. A
retry of such a batch must get PUT_OK only once the original bytes are as durable as a fresh
put would be, so `settle` runs the same flush and quorum wait on the producer's last stored
log end (a later sequence's end covers every earlier one).
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import zlib
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from connector.protocol import (
    IDEMPOTENCE_PROPERTY,
    PutIdempotence,
    PutReply,
    code_for,
    status_for,
)
from ha.broker.arrow_codec import block_to_batch
from ha.broker.batch_places import BatchPlace, BatchPositions, place_of_reply
from storage_engine import GetStatus, MessageStore

__all__ = [
    "IdempotenceConfig",
    "IdempotenceFollower",
    "IdempotenceTable",
    "IdempotentPuts",
    "marker_of",
    "markers_in",
    "rebuild_table",
]

_LOCK_STRIPES = 64
_REBUILD_READ_BYTES = 4 << 20
_REBUILD_BLOCK_MESSAGES = 4096


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IdempotenceConfig:
    producers_max: int = 100_000  # idempotenceProducersMax: producers remembered (LRU window)
    window_messages: int = 65_536  # idempotenceRebuildMessages: tail of each queue read at start
    window_ms: int = 86_400_000  # idempotenceRebuildWindowMs: markers older than this are not read
    batches_max: int = 5  # idempotenceBatchesKept: places kept per producer (Kafka's five)

    def __post_init__(self) -> None:
        assert self.producers_max >= 1 and self.window_messages >= 0 and self.window_ms >= 0
        assert self.batches_max >= 1


class IdempotenceTable:
    """producer_id -> (last stored sequence, log end of that batch, places of its last
    `batches_max` stored batches); the least recently stored producer goes first. Memory:
    at most producers_max * batches_max places of a few integers each."""

    def __init__(self, producers_max: int, batches_max: int = 5) -> None:
        assert producers_max >= 1 and batches_max >= 1
        self.producers_max = producers_max
        self.batches_max = batches_max
        self._last: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self._places: dict[str, collections.deque[BatchPlace]] = {}
        self.max_end = 0  # the highest log end recorded: a cut at or past it leaves the table true

    def __len__(self) -> int:
        return len(self._last)

    def is_duplicate(self, key: PutIdempotence) -> bool:
        last = self._last.get(key.producer_id)
        return last is not None and key.sequence <= last[0]

    def record(self, key: PutIdempotence, log_position_end: int = 0,
               place: BatchPlace | None = None) -> None:
        sequence, end = self._last.pop(key.producer_id, (-1, 0))
        self._last[key.producer_id] = (max(sequence, key.sequence), max(end, log_position_end))
        self.max_end = max(self.max_end, log_position_end)
        if place is not None:
            assert place.sequence == key.sequence, (place, key)
            places = self._places.get(key.producer_id)
            if places is None:
                places = self._places[key.producer_id] = collections.deque(
                    maxlen=self.batches_max)
            places.append(place)
        while len(self._last) > self.producers_max:
            evicted, _ = self._last.popitem(last=False)
            self._places.pop(evicted, None)

    def place_of(self, key: PutIdempotence) -> BatchPlace | None:
        """Where the producer's stored batch `key.sequence` is (None: not among the kept)."""
        for place in reversed(self._places.get(key.producer_id, ())):
            if place.sequence == key.sequence:
                return place
        return None

    def last_sequence(self, producer_id: str) -> int | None:
        last = self._last.get(producer_id)
        return None if last is None else last[0]

    def stored_end(self, producer_id: str) -> int:
        """The log end of the producer's last stored batch (0 if unknown)."""
        return self._last.get(producer_id, (0, 0))[1]


def marker_of(batch: pa.RecordBatch) -> PutIdempotence | None:
    """The idempotence key in the batch's last row, or None."""
    if batch.num_rows == 0 or "properties" not in batch.schema.names:
        return None
    last = batch.column("properties")[batch.num_rows - 1].as_py()
    for name, value in last or ():
        if name == IDEMPOTENCE_PROPERTY and value is not None:
            return PutIdempotence.from_marker(value)
    return None


def markers_in(properties: pa.Array) -> list[tuple[int, PutIdempotence]]:
    """(row index, key) of every marker in a properties column."""
    if properties.null_count == len(properties):
        return []
    flat_keys = properties.keys
    hits = pc.equal(flat_keys, IDEMPOTENCE_PROPERTY)
    if not pc.any(hits).as_py():
        return []
    found = []
    for index, value in enumerate(properties.to_pylist()):
        for name, text in value or ():
            if name == IDEMPOTENCE_PROPERTY and text is not None:
                key = PutIdempotence.from_marker(text)
                if key is not None:
                    found.append((index, key))
    return found


Locate = Callable[[BatchPlace, pa.RecordBatch], BatchPositions | None]
POSITION_UNKNOWN = "stored earlier; its position is no longer known"


class IdempotentPuts:
    """The broker's hook: `put(batch, store, settle, topic)` runs `store()` unless the batch is
    a duplicate; a duplicate is answered with `settle(log end of the original)`'s status and
    the original's positions, from its place or, when the place does not say them, from
    `locate(place, batch)` (ha/broker/batch_places.py `locate_in_log`)."""

    def __init__(self, table: IdempotenceTable, locate: Locate | None = None) -> None:
        self.table = table
        self._locate = locate
        self._table_lock = threading.Lock()
        self._stripes = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self.duplicates_dropped = 0

    def replace_table(self, table: IdempotenceTable) -> None:
        """Use a table rebuilt from the log (a promoted master: what it replicated as a slave
        was never recorded, and a truncation may have removed what was)."""
        with self._table_lock:
            self.table = table

    def put(self, batch: pa.RecordBatch, store: Callable[[], PutReply],
            settle: Callable[[int], str] = lambda _end: "PUT_OK", topic: str = "") -> PutReply:
        key = marker_of(batch)
        if key is None:
            return store()
        stripe = self._stripes[zlib.crc32(key.producer_id.encode()) % _LOCK_STRIPES]
        with stripe:
            with self._table_lock:
                duplicate = self.table.is_duplicate(key)
                end = self.table.stored_end(key.producer_id)
                place = self.table.place_of(key) if duplicate else None
            if duplicate:
                with self._table_lock:
                    self.duplicates_dropped += 1
                status = settle(end)
                return self._duplicate_reply(status, place, batch)
            reply = store()
            if status_for(reply.status).stored:
                with self._table_lock:
                    self.table.record(key, reply.log_position_end, place_of_reply(
                        key.sequence, topic, reply.queues, reply.row_queue_ids,
                        reply.log_position_end))
            return reply

    def _duplicate_reply(self, status: str, place: BatchPlace | None,
                         batch: pa.RecordBatch) -> PutReply:
        """A duplicate's answer: `status` (the original's durability now) with the original's
        positions; PUT_OK without them becomes DUPLICATE_POSITION_UNKNOWN."""
        positions = None
        if place is not None:
            positions = place.positions()
            if positions is None and self._locate is not None:
                positions = self._locate(place, batch)
        if positions is None:
            if status == "PUT_OK":
                status = "DUPLICATE_POSITION_UNKNOWN"
            return PutReply(status, code_for(status), [], None, -1, POSITION_UNKNOWN,
                            duplicate=True)
        return PutReply(status, code_for(status), positions.queues, positions.row_queue_ids,
                        positions.log_position_end, "", duplicate=True)


def rebuild_table(store: MessageStore, config: IdempotenceConfig, *, now_ms: int,
                  queues: Iterable[tuple[str, int]] | None = None) -> IdempotenceTable:
    """The table as the markers in the tail of every queue describe it (store-time order).

    Each queue is read backwards, a block at a time, until `window_messages` were read or a
    block starts before `now_ms - window_ms`, so idle queues cost one block read."""
    found: list[Found] = []
    oldest_ms = now_ms - config.window_ms
    for topic, queue_id in (store.queues() if queues is None else queues):
        low = max(store.min_queue_offset(topic, queue_id),
                  store.max_queue_offset(topic, queue_id) - config.window_messages)
        block_end = store.max_queue_offset(topic, queue_id)
        while block_end > low:  # bounded: block_end only decreases, by >= 1 per pass
            block_start = max(low, block_end - _REBUILD_BLOCK_MESSAGES)
            first_ms, _ = _scan_markers(store, topic, queue_id, block_start, block_end,
                                        found)
            if first_ms is None or first_ms < oldest_ms:
                break
            block_end = block_start
    table = IdempotenceTable(config.producers_max, config.batches_max)
    _record_found(table, found, oldest_ms)
    return table


# A marker found in the log: (store ms, log end, key, place of its batch)
Found = tuple[int, int, PutIdempotence, BatchPlace]


def _record_found(table: IdempotenceTable, found: list[Found], oldest_ms: int) -> None:
    """Record the markers found, oldest first, skipping those stored before `oldest_ms`. The
    places name the marker record only (rows None): the rest is located in the log when a
    retry asks."""
    for stored_ms, end, key, place in sorted(found, key=lambda item: (item[0], item[1])):
        if stored_ms >= oldest_ms:
            table.record(key, end, place)


def _scan_markers(store: MessageStore, topic: str, queue_id: int, start: int, end: int,
                  found: list[Found]) -> tuple[int | None, int]:
    """Markers of [start, end) into `found`; returns the first message's store ms (None when
    nothing could be read) and the queue offset the scan reached (<= end)."""
    first_ms = None
    cursor = start
    while cursor < end:  # bounded: every pass moves the cursor forward or stops
        block = store.get_message_block(topic, queue_id, cursor, max_count=end - cursor,
                                        max_bytes=_REBUILD_READ_BYTES)
        if block.status is not GetStatus.FOUND or len(block.sizes) == 0:
            if block.next_queue_offset <= cursor:
                break
            cursor = block.next_queue_offset
            continue
        batch = block_to_batch(block.data, block.sizes, topic)
        stored_ms = batch.column("store_timestamp").cast(pa.int64())
        if first_ms is None:
            first_ms = stored_ms[0].as_py()
        ends = pc.add(batch.column("log_position").cast(pa.int64()),
                      pa.array(block.sizes, pa.int64()))
        queue_offsets = batch.column("queue_offset")
        for index, key in markers_in(batch.column("properties")):
            log_end = ends[index].as_py()
            found.append((stored_ms[index].as_py(), log_end, key, BatchPlace(
                key.sequence, topic, queue_id, queue_offsets[index].as_py(), log_end, None)))
        cursor = block.next_queue_offset
    return first_ms, cursor


class IdempotenceFollower:
    """A slave's idempotence table, kept current from its replicated log in the background.

    `catch_up()` scans each queue forward from where the last pass stopped (the first pass:
    the rebuild window), so at promotion only what arrived since the last pass is read; a full
    `rebuild_table` there took ~2 s under load. A truncation of indexed records (a fork cut at
    the handshake, a take-over's cut of a partial put) makes the table stale only if it cut a
    record whose marker the table holds: then the next pass starts over; else the cursors come
    back to the queues' new ends. Not thread-safe: one thread (the broker's role thread) calls
    it."""

    def __init__(self, store: MessageStore, config: IdempotenceConfig) -> None:
        self._store = store
        self._config = config
        self._table = IdempotenceTable(config.producers_max, config.batches_max)
        self._next: dict[tuple[str, int], int] = {}
        self._index_cuts = store.index_cuts

    def catch_up(self, *, now_ms: int) -> IdempotenceTable:
        store, config = self._store, self._config
        if store.index_cuts != self._index_cuts:
            cut = store.lowest_cut_since(self._index_cuts)
            self._index_cuts = store.index_cuts
            if cut is not None and cut < self._table.max_end:  # a recorded marker was cut
                self._table = IdempotenceTable(config.producers_max, config.batches_max)
                self._next = {}
            else:
                self._next = {queue: min(cursor, store.max_queue_offset(*queue))
                              for queue, cursor in self._next.items()}
        found: list[Found] = []
        for topic, queue_id in store.queues():
            end = store.max_queue_offset(topic, queue_id)
            start = self._next.get((topic, queue_id))
            if start is None or start > end:  # new, or deleted and created again
                start = max(store.min_queue_offset(topic, queue_id), end - config.window_messages)
            if start < end:
                _, reached = _scan_markers(store, topic, queue_id, start, end, found)
                self._next[(topic, queue_id)] = reached
            else:
                self._next[(topic, queue_id)] = start
        _record_found(self._table, found, now_ms - config.window_ms)
        return self._table

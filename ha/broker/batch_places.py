"""Where an idempotent producer's stored batch is, so a retry is answered as the first put was.

A duplicate answer must name the original's positions (every row's queue id and queue offset,
the batch's log end): an acknowledgement without them breaks whatever was built on it (offsets
recorded for later reads, the proxy's receipts, checkers comparing acks with reads). The
idempotence table (ha/broker/idempotence.py) keeps a `BatchPlace` for each of a producer's last
`idempotenceBatchesKept` stored batches; a place is O(1) whatever the batch's rows:

    BatchPlace(sequence, topic, queue_id, queue_offset, log_position_end, rows)
      queue_id, queue_offset   of the batch's last row: the record carrying the marker
      log_position_end         that record's end, which is the batch's end
      rows                     the row count of a batch stored on ONE queue (known from the
                               put's own reply); None: the layout is read from the log

A single-queue batch's positions follow without IO: its rows are consecutive in that queue,
ending at the marker's offset. Any other place (a batch over several queues, or a place rebuilt
from the markers in the log after a restart or a take-over, where only the marker record is
known) is located in the log by `locate_in_log`, using what holds for every batch: it is one
CommitLog append of `rows` records in row order, ending at `log_position_end`. Walking back
from there through the topic's queues (one record ends where the next begins) finds exactly
those records; each found body is compared with the retried batch's row, and only the last
may carry a marker (an earlier one ends another producer's batch), so what is answered is the
original or nothing. Nothing (records removed by retention, a batch that crossed a segment
end, a retry whose rows differ) means "position unknown", which the broker answers with its
own status (DUPLICATE_POSITION_UNKNOWN), never a PUT_OK without positions.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from connector.protocol import IDEMPOTENCE_PROPERTY
from ha.broker.arrow_codec import block_to_batch
from storage_engine import GetStatus, MessageStore

__all__ = ["BatchPlace", "BatchPositions", "locate_in_log", "place_of_reply"]

_READ_BYTES_MAX = 64 << 20  # one read of a retried batch's rows (putBatchBytesMax is below)
_COLUMNS = ("queue_id", "queue_offset", "log_position", "body", "properties")


@dataclasses.dataclass(frozen=True, slots=True)
class BatchPlace:
    sequence: int
    topic: str
    queue_id: int
    queue_offset: int
    log_position_end: int
    rows: int | None  # rows of a single-queue batch; None: locate it in the log

    def positions(self) -> BatchPositions | None:
        """The positions, when they follow without reading the log."""
        if self.rows is None:
            return None
        first = self.queue_offset - self.rows + 1
        return BatchPositions([[self.queue_id, first, self.rows]], None, self.log_position_end)


@dataclasses.dataclass(frozen=True, slots=True)
class BatchPositions:
    """What a stored put's reply says of where its rows are (PutReply's fields)."""

    queues: list[list[int]]
    row_queue_ids: list[int] | None
    log_position_end: int


def place_of_reply(sequence: int, topic: str, queues: list[list[int]],
                   row_queue_ids: list[int] | None, log_position_end: int) -> BatchPlace | None:
    """The place of a batch from its stored reply (None when the reply names no rows)."""
    if not queues:
        return None
    if row_queue_ids is None or len({queue_id for queue_id, _, _ in queues}) == 1:
        queue_id, first, count = queues[0]
        return BatchPlace(sequence, topic, queue_id, first + count - 1, log_position_end,
                          count if len(queues) == 1 else None)
    last_queue = row_queue_ids[-1]
    for queue_id, first, count in queues:
        if queue_id == last_queue:
            return BatchPlace(sequence, topic, queue_id, first + count - 1, log_position_end,
                              None)
    return None


def locate_in_log(store: MessageStore, place: BatchPlace, batch: pa.RecordBatch
                  ) -> BatchPositions | None:
    """The positions of the stored batch `place` names, whose retry is `batch`, read from the
    log; None when the log cannot show them."""
    rows = batch.num_rows
    if rows == 0:
        return None
    bodies = _bodies(batch)
    first = place.queue_offset - rows + 1
    if first >= 0:  # the common shape: one queue, consecutive offsets
        found = _read(store, place.topic, place.queue_id, first, rows)
        if found is not None and _is_batch(found, place.log_position_end, bodies):
            return _positions(found, place.log_position_end)
    return _walk_back(store, place, bodies)


# (log_position, size, queue_id, queue_offset, body, carries an idempotence marker)
Record = tuple[int, int, int, int, bytes, bool]


def _bodies(batch: pa.RecordBatch) -> list[bytes]:
    return [body if isinstance(body, bytes) else str(body).encode()
            for body in batch.column("body").to_pylist()]


def _read(store: MessageStore, topic: str, queue_id: int, queue_offset: int,
          count: int) -> list[Record] | None:
    """`count` records of a queue from `queue_offset` (None if not all could be read)."""
    block = store.get_message_block(topic, queue_id, queue_offset, max_count=count,
                                    max_bytes=_READ_BYTES_MAX)
    if block.status is not GetStatus.FOUND or len(block.sizes) != count:
        return None
    decoded = block_to_batch(block.data, block.sizes, topic, _COLUMNS)
    sizes = [int(size) for size in block.sizes]
    marked = [any(name == IDEMPOTENCE_PROPERTY for name, _ in properties or ())
              for properties in decoded.column("properties").to_pylist()]
    return list(zip(decoded.column("log_position").to_pylist(), sizes,
                    decoded.column("queue_id").to_pylist(),
                    decoded.column("queue_offset").to_pylist(),
                    decoded.column("body").to_pylist(), marked, strict=True))


def _is_batch(records: list[Record], log_position_end: int, bodies: list[bytes]) -> bool:
    """The records tile the log up to `log_position_end`, hold the batch's bodies, and only
    the last carries a marker (an earlier one ends another producer's batch)."""
    if len(records) != len(bodies) or not records[-1][5]:
        return False
    end = log_position_end
    for (position, size, _, _, body, marked), expected in zip(
            reversed(records), reversed(bodies), strict=True):
        if position + size != end or body != expected or (marked and end != log_position_end):
            return False
        end = position
    return True


def _positions(records: list[Record], log_position_end: int) -> BatchPositions:
    ranges: dict[int, list[int]] = {}
    for _, _, queue_id, queue_offset, _, _ in records:
        entry = ranges.get(queue_id)
        if entry is None:
            ranges[queue_id] = [queue_id, queue_offset, 1]
        else:
            entry[2] += 1
    row_queue_ids = [record[2] for record in records]
    uniform = len(ranges) == 1
    return BatchPositions(list(ranges.values()), None if uniform else row_queue_ids,
                          log_position_end)


def _walk_back(store: MessageStore, place: BatchPlace, bodies: list[bytes]
               ) -> BatchPositions | None:
    """The batch's records found by walking back from its end through the topic's queues:
    at each step the record that ends where the last one found begins."""
    end = place.log_position_end
    heads: dict[int, Record | None] = {}  # per queue: its last record before `end`
    for topic, queue_id in store.queues():
        if topic == place.topic:
            heads[queue_id] = _last_before(store, topic, queue_id, end)
    found: list[Record] = []
    for _ in range(len(bodies)):  # bounded: one record per row
        step = next((record for record in heads.values()
                     if record is not None and record[0] + record[1] == end), None)
        if step is None:
            return None
        found.append(step)
        end = step[0]
        queue_id, queue_offset = step[2], step[3]
        before = None
        if queue_offset > store.min_queue_offset(place.topic, queue_id):
            records = _read(store, place.topic, queue_id, queue_offset - 1, 1)
            before = None if records is None else records[0]
        heads[queue_id] = before
    found.reverse()
    if not _is_batch(found, place.log_position_end, bodies):
        return None
    return _positions(found, place.log_position_end)


def _last_before(store: MessageStore, topic: str, queue_id: int,
                 log_position: int) -> Record | None:
    """The queue's last record that begins before `log_position` (binary search)."""
    low = store.min_queue_offset(topic, queue_id)
    high = store.max_queue_offset(topic, queue_id)  # answer in [low - 1, high - 1]
    best: Record | None = None
    while low < high:  # bounded: the range halves
        middle = (low + high) // 2
        records = _read(store, topic, queue_id, middle, 1)
        if records is None:
            return None
        if records[0][0] < log_position:
            best = records[0]
            low = middle + 1
        else:
            high = middle
    return best

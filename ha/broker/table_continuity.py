"""Is the table's last row of a queue this topic's message? (a topic created again, caught)

A topic deleted and created again under the same name starts its queues at offset 0 again,
while its table stays with the old topic's rows. While a new queue is behind the table's end,
the plan says `Ahead` (ha/broker/table_plan.py). Once it has passed the end, offsets alone
cannot tell: the next commit would append the new topic's messages from the old end on. So
before a commit appends to queue q at the table's end e, the message the store holds at e - 1
must be the table's row at e - 1:

    mark = (store timestamp ms, BLAKE2b digest of the body)     both are in the replicated
                                                                record, so every replica of
                                                                the set gives the same mark
    known mark of (q, e - 1)?   from this writer's own last commit of q, else looked up once
                                in the table (the snapshot's dataset filtered on brokerName,
                                queueId, queueOffset: Delta's file statistics skip the rest)
    store's mark == known       -> this topic: commit
    different                   -> `foreign`: no commit of any queue (as Ahead)
    no row (retention dropped   -> cannot tell: commit (nothing to compare with)
      it), or e - 1 below the
      store's first offset

A mark remembered from this writer's commits costs one store read per appended queue per
pass; a table lookup happens once per queue per writer (after a start or a failover).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from storage_engine import GetStatus, MessageStore

__all__ = ["Continuity", "RowMark"]

DIGEST_BYTES = 16


@dataclasses.dataclass(frozen=True, slots=True)
class RowMark:
    store_ms: int
    body_digest: bytes

    @classmethod
    def of(cls, store_ms: int, body: bytes | None) -> RowMark:
        return cls(store_ms, hashlib.blake2b(body or b"", digest_size=DIGEST_BYTES).digest())


class Continuity:
    """The marks of one topic's table, per queue: (queue offset, mark) of its last row."""

    def __init__(self, store: MessageStore, topic: str, broker_name: str) -> None:
        self.store = store
        self.topic = topic
        self.broker_name = broker_name
        self._marks: dict[int, tuple[int, RowMark]] = {}

    def remember(self, rows: pa.Table) -> None:
        """After a commit of `rows` (TABLE_SCHEMA, each queue in offset order): the last row
        of each queue is its table end's mark."""
        if rows.num_rows == 0:
            return
        queue_ids = rows.column("queueId").to_numpy()
        # the last row of each queue: its first in the reversed column (no Python loop over
        # the rows: a commit holds up to topicTableCommitRowsMax of them)
        found, first_reversed = np.unique(queue_ids[::-1], return_index=True)
        offsets = rows.column("queueOffset")
        stored = rows.column("storeTimestamp")
        bodies = rows.column("body")
        for queue_id, reversed_index in zip(found.tolist(), first_reversed.tolist(),
                                            strict=True):
            index = len(queue_ids) - 1 - reversed_index
            self._marks[queue_id] = (offsets[index].as_py(), RowMark.of(
                stored[index].cast(pa.int64()).as_py() // 1000, bodies[index].as_py()))

    def foreign(self, table: DeltaTable | None, appends: Mapping[int, int]
                ) -> tuple[int, ...]:
        """Of `appends` (queue id -> the table's end a commit appends at), the queues whose
        table row at end - 1 is not the store's message there."""
        found = []
        lookups: dict[int, int] = {}
        store_marks: dict[int, RowMark] = {}
        for queue_id, end in appends.items():
            offset = end - 1
            if offset < self.store.min_queue_offset(self.topic, queue_id):
                continue
            store_mark = self._store_mark(queue_id, offset)
            if store_mark is None:
                continue
            store_marks[queue_id] = store_mark
            known = self._marks.get(queue_id)
            if known is None or known[0] != offset:
                lookups[queue_id] = offset
        if lookups and table is not None:
            self._marks.update(self._table_marks(table, lookups))
        for queue_id, store_mark in store_marks.items():
            known = self._marks.get(queue_id)
            if known is not None and known[0] == appends[queue_id] - 1 \
                    and known[1] != store_mark:
                found.append(queue_id)
        return tuple(sorted(found))

    def _store_mark(self, queue_id: int, offset: int) -> RowMark | None:
        got = self.store.get_messages(self.topic, queue_id, offset, max_count=1, max_bytes=1)
        if got.status is not GetStatus.FOUND or not got.records:
            return None
        message = got.messages()[0]
        return RowMark.of(message.store_timestamp_ms, message.body)

    def _table_marks(self, table: DeltaTable, lookups: dict[int, int]
                     ) -> dict[int, tuple[int, RowMark]]:
        wanted = None
        for queue_id, offset in lookups.items():
            one = (pc.field("queueId") == queue_id) & (pc.field("queueOffset") == offset)
            wanted = one if wanted is None else wanted | one
        assert wanted is not None
        # the files whose statistics may hold a wanted row (Delta's per-file min/max), then
        # the rows (Parquet's row-group statistics)
        files = [[("brokerName", "=", self.broker_name), ("queueId", "=", queue_id),
                  ("queueOffset", "=", offset)] for queue_id, offset in lookups.items()]
        rows = table.to_pyarrow_dataset(file_pruning_predicate=files).to_table(
            columns=["queueId", "queueOffset", "storeTimestamp", "body"],
            filter=(pc.field("brokerName") == self.broker_name) & wanted)
        stored = rows.column("storeTimestamp").cast(pa.int64()).to_pylist()
        return {queue_id: (offset, RowMark.of(store_us // 1000, body))
                for queue_id, offset, store_us, body in zip(
                    rows.column("queueId").to_pylist(), rows.column("queueOffset").to_pylist(),
                    stored, rows.column("body").to_pylist(), strict=True)}


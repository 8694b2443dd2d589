"""Topic tables, the decisions: what the next Delta commit of one topic holds (pure).

A topic opted in (`table=delta`) is copied by its replica set's master into one Delta table
(docs/topic-tables.md; the IO is ha/broker/topic_table.py). Every commit carries, in the same
atomic Delta commit as its rows, application transactions (Delta `txn` actions: the table's
snapshot keeps the newest version of each app id, readable by any Delta reader):

    app id                        version
    rocketha/<brokerName>/<q>     the next queue offset of queue q not in the table
                                  (every offset below it is in the table exactly once)
    rocketha/<brokerName>         fence: master_epoch << FENCE_EPOCH_SHIFT | sequence
                                  (sequence: this epoch's commits, from 1)

The planner reads those, the queues' offsets in the store and this master's epoch:

    table fence epoch > ours          -> Fenced: a newer master writes this table (this broker
                                         was deposed): never commit again under this epoch
    per queue q (next_q from the table, or the store's min offset when the table has none):
      next_q < store min              -> skip to the store min: those messages are gone from
                                         the log and the tier (counted as `skipped`)
      else                            -> range [next_q, min(store max, next_q + share))
    any queue with next_q > store max -> Ahead: the table holds offsets this store has not
                                         confirmed (a topic deleted and created again under
                                         the same name, or a confirm position not yet back
                                         after a failover): no commit of any queue, so two
                                         incarnations of a topic never mix in one table; the
                                         next pass looks again
    no range and the fence is ours    -> None (nothing to do)
    otherwise                         -> CommitPlan (a new epoch always commits once, even
                                         with no rows: its fence stops the deposed master)

`share` splits `rows_max` (topicTableCommitRowsMax) over the queues with pending messages by
water-filling (every queue gets the same share, a queue needing less gives the rest to the
others), so one busy queue never starves the rest. The shell reads each range through the
store (bounded by topicTableCommitBytesMax too: a range may end early) and `transactions()`
turns what was read into the commit's app transactions.

The commit lands only on the snapshot the plan was made from (delta-rs with no rebasing
retries: put-if-absent of the next log version), so the plan's checks hold at commit time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from connector.protocol.table_ids import fence_app_id, queue_app_id

__all__ = [
    "FENCE_EPOCH_SHIFT",
    "Ahead",
    "CommitPlan",
    "Fenced",
    "QueueState",
    "QueueTake",
    "fence_app_id",
    "fence_version",
    "plan_commit",
    "queue_app_id",
    "split_fence",
    "transactions",
]

FENCE_EPOCH_SHIFT = 32  # Delta txn versions are int64: epoch in the high half, sequence low
FENCE_SEQUENCE_MAX = (1 << FENCE_EPOCH_SHIFT) - 1
EPOCH_MAX = (1 << (63 - FENCE_EPOCH_SHIFT)) - 1


def fence_version(master_epoch: int, sequence: int) -> int:
    assert 0 <= master_epoch <= EPOCH_MAX, master_epoch
    assert 0 <= sequence <= FENCE_SEQUENCE_MAX, sequence
    return master_epoch << FENCE_EPOCH_SHIFT | sequence


def split_fence(version: int) -> tuple[int, int]:
    """(master_epoch, sequence) of a fence version."""
    assert version >= 0, version
    return version >> FENCE_EPOCH_SHIFT, version & FENCE_SEQUENCE_MAX


@dataclasses.dataclass(frozen=True, slots=True)
class QueueState:
    """One queue of the topic: what the table holds and what the store has."""

    queue_id: int
    table_next_offset: int | None  # the table's txn version for the queue; None: no row yet
    min_offset: int  # the store's first readable queue offset (local or tier)
    max_offset: int  # the store's next confirmed queue offset (confirmed: < this)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueTake:
    """Rows [start_offset, end_offset) of one queue to read into the commit."""

    queue_id: int
    start_offset: int
    end_offset: int
    skipped_count: int = 0  # offsets below start_offset the table will never hold

    @property
    def count(self) -> int:
        return self.end_offset - self.start_offset


@dataclasses.dataclass(frozen=True, slots=True)
class CommitPlan:
    master_epoch: int
    sequence: int  # this commit's sequence within the epoch (the fence's low half)
    takes: tuple[QueueTake, ...]  # by queue id; only queues that move (rows or a skip)
    pending_count: int = 0  # confirmed messages not in the table (before this commit)

    @property
    def fence(self) -> int:
        return fence_version(self.master_epoch, self.sequence)

    @property
    def rows_planned(self) -> int:
        return sum(take.count for take in self.takes)


@dataclasses.dataclass(frozen=True, slots=True)
class Fenced:
    """A newer master's commit is in the table: this epoch may not commit."""

    master_epoch: int
    table_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class Ahead:
    """The table holds offsets past this store's confirmed end in `queue_ids`."""

    queue_ids: tuple[int, ...]


def plan_commit(*, master_epoch: int, table_fence: int | None, queues: Sequence[QueueState],
                rows_max: int) -> CommitPlan | Fenced | Ahead | None:
    """The next commit of one topic by this replica set's master (see the module doc)."""
    assert rows_max > 0
    table_epoch, table_sequence = (-1, 0) if table_fence is None else split_fence(table_fence)
    if table_epoch > master_epoch:
        return Fenced(master_epoch, table_epoch)
    sequence = table_sequence + 1 if table_epoch == master_epoch else 1
    starts: dict[int, tuple[int, int]] = {}  # queue -> (start, skipped)
    pending: dict[int, int] = {}
    ahead = []
    for queue in sorted(queues, key=lambda q: q.queue_id):
        assert 0 <= queue.min_offset <= queue.max_offset, queue
        table_next = queue.min_offset if queue.table_next_offset is None \
            else queue.table_next_offset
        if table_next > queue.max_offset:
            ahead.append(queue.queue_id)
            continue
        start = max(table_next, queue.min_offset)
        skipped = start - table_next if queue.table_next_offset is not None else 0
        starts[queue.queue_id] = (start, skipped)
        pending[queue.queue_id] = queue.max_offset - start
    if ahead:
        return Ahead(tuple(ahead))
    shares = water_fill(pending, rows_max)
    takes = tuple(QueueTake(queue_id, start, start + shares[queue_id], skipped)
                  for queue_id, (start, skipped) in starts.items()
                  if shares[queue_id] or skipped)
    if not takes and table_epoch == master_epoch:
        return None
    return CommitPlan(master_epoch, sequence, takes, sum(pending.values()))


def water_fill(pending: Mapping[int, int], total_max: int) -> dict[int, int]:
    """Split `total_max` over the keys: each gets at most its `pending`, the same share as the
    others otherwise (the remainder to the lowest keys), deterministic."""
    shares = dict.fromkeys(pending, 0)
    left = total_max
    open_keys = sorted(key for key, count in pending.items() if count > 0)
    while open_keys and left > 0:
        share, extra = divmod(left, len(open_keys))
        still_open = []
        for index, key in enumerate(open_keys):
            grant = min(pending[key] - shares[key], share + (1 if index < extra else 0))
            shares[key] += grant
            left -= grant
            if shares[key] < pending[key]:
                still_open.append(key)
        if len(still_open) == len(open_keys):
            break  # every queue took its full share: `left` is 0
        open_keys = still_open
    return shares


def transactions(plan: CommitPlan, broker_name: str,
                 read_counts: Mapping[int, int]) -> list[tuple[str, int]]:
    """The commit's app transactions, (app id, version): the fence, then each queue whose
    table offset moves, to the end of what was read (`read_counts`: rows read per queue, a
    prefix of its take: the byte budget may end a range early)."""
    result = [(fence_app_id(broker_name), plan.fence)]
    for take in plan.takes:
        count = read_counts.get(take.queue_id, 0)
        assert 0 <= count <= take.count, (take, count)
        if count or take.skipped_count:
            result.append((queue_app_id(broker_name, take.queue_id), take.start_offset + count))
    return result

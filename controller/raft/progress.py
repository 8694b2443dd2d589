"""What a leader knows about each follower's log, and the quorum arithmetic.

Per-follower replication state (etcd's Progress, simplified):

            reject / heartbeat shows a gap
        +-------------------------------------+
        v                                     |
     PROBE --- success --------------> REPLICATE
       |  ^                                   |
       |  +--- success at/after snapshot ---+ |  (needed entries compacted away)
       +--- needed entries compacted ------> SNAPSHOT <-+
                                              (retried after an election timeout)

- PROBE: one AppendRequest at a time (`probe_sent`) until the follower's match is found;
  `probe_sent` clears on every heartbeat response, which paces retries.
- REPLICATE: send optimistically (next_index jumps past what was sent) while fewer than
  `inflight_entries_max` entries are unacknowledged.
- SNAPSHOT: a snapshot is on its way; nothing else is sent until a response shows the follower
  holds it, or `snapshot_elapsed_ticks` reaches an election timeout (the message may be lost).

`match_index` only grows (stale or duplicated responses cannot move it back).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["Progress", "ProgressState", "quorum_index"]


class ProgressState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    __slots__ = (
        "match_index",
        "next_index",
        "pending_snapshot_index",
        "probe_sent",
        "read_seq_acked",
        "recent_active",
        "snapshot_elapsed_ticks",
        "state",
    )

    def __init__(self, next_index: int) -> None:
        self.match_index = 0
        self.next_index = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot_index = 0
        self.snapshot_elapsed_ticks = 0
        self.recent_active = False  # heard from since the last check-quorum round
        self.read_seq_acked = 0  # highest ReadIndex round this follower confirmed

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next_index = max(self.match_index + 1, self.pending_snapshot_index + 1)
        else:
            self.next_index = self.match_index + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot_index = 0

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next_index = self.match_index + 1
        self.probe_sent = False

    def become_snapshot(self, snapshot_index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot_index = snapshot_index
        self.snapshot_elapsed_ticks = 0
        self.probe_sent = False

    def maybe_update(self, match_index: int) -> bool:
        """Record an acknowledged match. Returns whether match_index grew."""
        updated = match_index > self.match_index
        if updated:
            self.match_index = match_index
            self.probe_sent = False
        self.next_index = max(self.next_index, match_index + 1)
        return updated

    def maybe_decrease(self, reject_index: int, hint_index: int) -> bool:
        """Handle a refusal of prev_index `reject_index`. Returns False when it is stale."""
        if self.state is ProgressState.REPLICATE:
            if reject_index <= self.match_index:
                return False  # an old refusal; we already know better
            self.next_index = self.match_index + 1
            return True
        if self.next_index - 1 != reject_index:
            return False  # not the answer to our current probe
        self.next_index = max(min(reject_index, hint_index + 1), self.match_index + 1, 1)
        self.probe_sent = False
        return True

    def is_paused(self, inflight_entries_max: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.next_index - 1 - self.match_index >= inflight_entries_max
        return True

    def __repr__(self) -> str:
        return (
            f"Progress({self.state.value} match={self.match_index} next={self.next_index}"
            f" active={self.recent_active})"
        )


def quorum_index(match_indexes: Iterable[int], quorum_size: int) -> int:
    """The highest index held by at least `quorum_size` voters."""
    ordered = sorted(match_indexes, reverse=True)
    assert len(ordered) >= quorum_size
    return ordered[quorum_size - 1]

"""ReadIndex (Raft thesis §6.4): the leader's queue of linearizable reads (etcd's read_only.go).

A read costs no log entry. The leader numbers each read with a heartbeat round (`read_seq`,
carried by HeartbeatRequest and echoed by HeartbeatResponse into `Progress.read_seq_acked`)
and answers it, in arrival order, with an entry index the state must reach first:

1. the index is the commit index, taken once the leader has committed an entry of its own
   term (until then its commit index may be behind what an earlier leader committed);
2. the read is released once a majority (the leader counting itself) acknowledged a heartbeat
   round at or after the read's: no other leader could have committed anything newer by then.

Reads are dropped when the node stops leading (`clear`); their callers time out and retry at
the new leader. Sans-IO like the rest of `controller.raft`: `RaftNode` feeds it.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from controller.raft.messages import ReadState

__all__ = ["PendingReads"]


class _PendingRead:
    __slots__ = ("entry_index", "read_seq", "request_id")

    def __init__(self, request_id: int, read_seq: int) -> None:
        self.request_id = request_id
        self.read_seq = read_seq
        self.entry_index: int | None = None  # set once the leader committed in its term


class PendingReads:
    """The reads a leader has started and not yet released, oldest first."""

    def __init__(self, *, reads_max: int) -> None:
        assert reads_max > 0
        self.reads_max = reads_max
        self.read_seq = 0  # the latest heartbeat round started for a read
        self._pending: collections.deque[_PendingRead] = collections.deque()

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, request_id: int) -> None:
        """Queue a read under a new heartbeat round (the caller broadcasts it)."""
        assert len(self._pending) < self.reads_max
        self.read_seq += 1
        self._pending.append(_PendingRead(request_id, self.read_seq))

    def clear(self) -> None:
        self._pending.clear()

    def release(self, *, committed_index: int, term_committed: bool,
                peer_read_seqs_acked: Sequence[int], quorum_size: int) -> list[ReadState]:
        """The reads a majority confirmed, in order (module docstring). `term_committed`: the
        leader has committed an entry of its term; `peer_read_seqs_acked`: the latest round
        each peer (not the leader) acknowledged."""
        released: list[ReadState] = []
        while self._pending:
            read = self._pending[0]
            if read.entry_index is None:
                if not term_committed:
                    break
                read.entry_index = committed_index
            acked = 1 + sum(1 for read_seq in peer_read_seqs_acked if read_seq >= read.read_seq)
            if acked < quorum_size:
                break
            self._pending.popleft()
            released.append(ReadState(read.request_id, read.entry_index))
        return released

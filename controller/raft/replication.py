"""Log replication, both ends: what a Raft leader sends its followers and what it concludes
from their answers, and how a follower takes appends and snapshots.

`Replication` is a base class of `RaftNode` (core.py) holding these methods; the node's state
lives in `RaftNode.__init__`, and the names this half uses are declared below for the type
checker. The leader side:

- appends and snapshots per follower, paced by `Progress` (progress.py: probe, replicate,
  snapshot) and `inflight_entries_max`;
- heartbeats, which also carry the ReadIndex rounds (read_index.py) and reveal lost appends;
- commit by quorum, counting only entries of the leader's own term (§5.4.2), then telling
  every follower; the leader's own match index moves in `advance()`, once its entries are on
  its disk (core.py: persist before send);
- TimeoutNow to a transfer target once its log holds the leader's last entry (transfer.py).

Why the seam is here: core.py decides *who* leads (roles, ticks, pre-vote, votes, the term
rules, check-quorum) and owns the contract with the shell (tick/step/propose/ready/advance);
this module decides *what the logs hold* under a leader that already won. The arrow is one
way: core.py calls in here (send an append, handle one), while this half calls nothing of
core.py's and reads only the node's shared state (term, role, log, progress). How appends are
paced or a conflict found can change without touching how a term is won.
"""

from __future__ import annotations

import logging

from controller.raft.config import RaftConfig
from controller.raft.log import RaftLog
from controller.raft.messages import (
    AppendRequest,
    AppendResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ReadState,
    Role,
    SnapshotRequest,
)
from controller.raft.progress import Progress, ProgressState, quorum_index
from controller.raft.read_index import PendingReads
from controller.raft.transfer import LeadershipTransfer

__all__ = ["FROM_LEADER", "Replication"]

logger = logging.getLogger(__name__)

FROM_LEADER = (AppendRequest, HeartbeatRequest, SnapshotRequest)  # what only a leader sends


class Replication:
    """`RaftNode`'s replication methods (module docstring); `RaftNode` holds the state."""

    config: RaftConfig
    log: RaftLog
    term: int
    role: Role
    progress: dict[int, Progress]
    _messages: list[Message]
    _read_states: list[ReadState]
    _reads: PendingReads
    _transfer: LeadershipTransfer

    @property
    def node_id(self) -> int:
        return self.config.node_id

    # -- follower --------------------------------------------------------------------------

    def _handle_append(self, message: AppendRequest) -> None:
        log = self.log
        if message.prev_index < log.committed_index:
            self._send_append_response(message.from_id, log.committed_index)
            return
        last_new = log.maybe_append(
            message.prev_index, message.prev_term, message.commit_index, message.entries
        )
        if last_new is not None:
            self._send_append_response(message.from_id, last_new)
            return
        hint_index = log.find_conflict_by_term(message.prev_index, message.prev_term)
        hint_term = log.term_at(hint_index)
        assert hint_term is not None
        self._send(AppendResponse(
            self.node_id, message.from_id, self.term, False, 0, message.prev_index, hint_index,
            hint_term,
        ))

    def _handle_snapshot(self, message: SnapshotRequest) -> None:
        snapshot, log = message.snapshot, self.log
        if snapshot.entry_index <= log.committed_index:
            self._send_append_response(message.from_id, log.committed_index)
        elif log.match_term(snapshot.entry_index, snapshot.term):
            log.commit_to(snapshot.entry_index)  # we hold it already: just fast-forward
            self._send_append_response(message.from_id, log.committed_index)
        else:
            logger.info("node %d installs snapshot at %d (term %d)", self.node_id,
                        snapshot.entry_index, snapshot.term)
            log.restore(snapshot)
            self._send_append_response(message.from_id, log.last_index)

    def _send_append_response(self, to_id: int, match_index: int) -> None:
        self._send(AppendResponse(self.node_id, to_id, self.term, True, match_index, 0, 0, 0))

    # -- leader ----------------------------------------------------------------------------

    def _step_leader(self, message: Message) -> None:
        if isinstance(message, AppendResponse):
            self._handle_append_response(message)
        elif isinstance(message, HeartbeatResponse):
            progress = self.progress[message.from_id]
            progress.recent_active = True
            progress.probe_sent = False
            progress.read_seq_acked = max(progress.read_seq_acked, message.read_seq)
            if progress.state is ProgressState.REPLICATE and (
                progress.match_index < self.log.last_index
            ):
                progress.become_probe()  # something was lost on the way: resend from match
            if progress.match_index < self.log.last_index:
                self._send_append(message.from_id, send_empty=True)
            self._release_reads()
        elif isinstance(message, FROM_LEADER):
            logger.warning("node %d (leader t%d) got %r", self.node_id, self.term, message)

    def _handle_append_response(self, message: AppendResponse) -> None:
        peer = message.from_id
        progress = self.progress[peer]
        progress.recent_active = True
        if not message.success:
            probe_index = message.hint_index
            if message.hint_term > 0:
                probe_index = self.log.find_conflict_by_term(message.hint_index, message.hint_term)
            if progress.maybe_decrease(message.reject_index, probe_index):
                if progress.state is ProgressState.REPLICATE:
                    progress.become_probe()
                self._send_append(peer, send_empty=True)
            return
        if not progress.maybe_update(message.match_index):
            return
        if peer == self._transfer.to_id and progress.match_index == self.log.last_index:
            self._send_timeout_now()
        if progress.state is ProgressState.PROBE:
            progress.become_replicate()
        elif progress.state is ProgressState.SNAPSHOT and (
            progress.match_index >= progress.pending_snapshot_index
        ):
            progress.become_probe()
        if not self._maybe_commit_and_broadcast():
            for _ in range(self.config.inflight_entries_max):
                if not self._send_append(peer, send_empty=False):
                    break

    def _maybe_commit_and_broadcast(self) -> bool:
        """Commit what a majority holds, if it is of this term (§5.4.2), and tell everyone."""
        matches = (self.progress[voter].match_index for voter in self.config.voter_ids)
        index = quorum_index(matches, self.config.quorum_size)
        if index <= self.log.committed_index or self.log.term_at(index) != self.term:
            return False
        self.log.commit_to(index)
        self._release_reads()
        self._broadcast_append()
        return True

    def _broadcast_append(self) -> None:
        for peer in self.config.peer_ids:
            self._send_append(peer, send_empty=True)

    def _broadcast_heartbeat(self) -> None:
        for peer in self.config.peer_ids:
            progress = self.progress[peer]
            commit_index = min(progress.match_index, self.log.committed_index)
            self._send(HeartbeatRequest(self.node_id, peer, self.term, commit_index,
                                        self._reads.read_seq))

    def _send_append(self, peer: int, *, send_empty: bool) -> bool:
        """Send the entries `peer` lacks (or the snapshot). Returns whether anything was sent."""
        progress, log = self.progress[peer], self.log
        if progress.is_paused(self.config.inflight_entries_max):
            return False
        prev_index = progress.next_index - 1
        prev_term = log.term_at(prev_index)
        if prev_term is None:  # the entries it needs are compacted into the snapshot
            self._send(SnapshotRequest(self.node_id, peer, self.term, log.snapshot))
            progress.become_snapshot(log.snapshot.entry_index)
            return True
        entries = log.entries_from(progress.next_index, self.config.append_entries_max)
        if not entries and not send_empty:
            return False
        self._send(AppendRequest(
            self.node_id, peer, self.term, prev_index, prev_term, tuple(entries),
            log.committed_index,
        ))
        if progress.state is ProgressState.REPLICATE and entries:
            progress.next_index = entries[-1].entry_index + 1
        elif progress.state is ProgressState.PROBE:
            progress.probe_sent = True
        return True

    def _send_timeout_now(self) -> None:
        """Once per transfer: a second one would start a second election (a new term)."""
        message = self._transfer.timeout_now(self.node_id, self.term)
        if message is not None:
            self._send(message)

    def _release_reads(self) -> None:
        """Answer pending reads whose heartbeat round a majority confirmed, in order."""
        if self.role is not Role.LEADER or not self._reads:
            return
        self._read_states += self._reads.release(
            committed_index=self.log.committed_index,
            term_committed=self.log.term_at(self.log.committed_index) == self.term,
            peer_read_seqs_acked=[self.progress[peer].read_seq_acked
                                  for peer in self.config.peer_ids],
            quorum_size=self.config.quorum_size)

    def _send(self, message: Message) -> None:
        self._messages.append(message)

"""RaftNode: Raft as a pure state machine in the shape of etcd's raft (tick/step/propose/ready).

No clock, socket, file or global random in here: time is `tick()`, randomness is an injected
`random.Random`, input is `step(message)` / `propose(data)` / `read_index(request_id)`, and
every output is collected into a `Ready` that the shell drains:

    while node.has_ready():
        ready = node.ready()
        storage.save(ready.snapshot, ready.entries, ready.hard_state)   # fsync before step 2
        transport.send(ready.messages)
        state_machine.apply(ready.snapshot, ready.committed); answer ready.read_states
        node.advance(ready)

**Persist before send.** The shell must make `ready.snapshot`, `ready.entries` and
`ready.hard_state` durable (fsync) before it sends any of `ready.messages`, and it must not
call `step`/`tick`/`propose` between `ready()` and `advance()`. Why: a vote grant or an append
acknowledgement is a promise about what is on disk. If a node granted its vote, crashed before
the vote reached the disk and restarted, it could grant a second vote in the same term (two
leaders in one term); if a follower acknowledged entries that were still in memory, a leader
could count it toward a majority, commit, and then the entries could vanish in a crash. The same
rule makes the leader count itself toward a commit only for entries it has persisted: its own
match index moves in `advance()`, never when it appends.

Roles (role-as-handler: each `_become_*` swaps `_on_message` and `_on_tick`):

                 election timeout            pre-vote majority          vote majority
    FOLLOWER ------------------> PRE_CANDIDATE -----------> CANDIDATE -------------> LEADER
       ^  ^                          |  (timeout: new pre-vote) |  (timeout: new term)  |
       |  +--- lost / higher term ---+---------------------------+                      |
       +---------- higher term, or no majority heard for an election timeout -----------+
                   (check-quorum)

- Pre-vote (thesis §9.6): a node first asks whether it *could* win, without raising its term,
  so a node that was cut off does not disrupt a healthy leader when it comes back.
- Leader stickiness: with check-quorum on, a node that heard from a leader within the election
  timeout ignores vote requests of higher terms.
- A new leader appends a NOOP entry; it commits by counting only entries of its own term
  (§5.4.2); earlier entries commit with it.
- ReadIndex (thesis §6.4): a read is answered with the commit index, once the leader has
  committed an entry of its term and a heartbeat round started after the request was confirmed
  by a majority.
- Leadership transfer (thesis §3.10, `transfer_leadership`): the leader refuses new proposals
  (DROPPED) until its chosen follower has caught up and been sent TimeoutNow; that follower
  campaigns at once, without a pre-vote, and voters grant its `transfer` vote requests even
  while they hear the leader. The leader's bookkeeping and its diagram: transfer.py.

`RaftNode` is split along election and replication. This module holds the contract with the
shell, the roles and their ticks, and elections (pre-vote, votes, the term rules, leader
stickiness, check-quorum, a follower's TimeoutNow): *who* leads. Its base class `Replication`
(replication.py) holds log replication, both ends: appends, snapshots, heartbeats, commit by
quorum, the release of reads: *what the logs hold* under that leader. The two meet only in the
node's state (term, role, log, progress), which `__init__` below creates.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence

from controller.raft.config import RaftConfig
from controller.raft.log import RaftLog
from controller.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HardState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ProposeResult,
    ProposeStatus,
    ReadState,
    Ready,
    Role,
    Snapshot,
    SnapshotRequest,
    SoftState,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from controller.raft.progress import Progress, ProgressState
from controller.raft.read_index import PendingReads
from controller.raft.replication import FROM_LEADER, Replication
from controller.raft.transfer import LeadershipTransfer, best_target

__all__ = ["RaftNode"]

logger = logging.getLogger(__name__)


class RaftNode(Replication):
    """One Raft peer. See the module docstring for the contract with the shell."""

    def __init__(
        self,
        config: RaftConfig,
        rng: random.Random,
        *,
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
    ) -> None:
        self.config = config
        self._rng = rng
        hard_state = hard_state or HardState(term=0, voted_for=None, commit_index=0)
        snapshot = snapshot or Snapshot(0, 0, config.voter_ids, b"")
        commit_index = max(hard_state.commit_index, snapshot.entry_index)
        self.log = RaftLog(snapshot, entries, commit_index)
        self.term = hard_state.term
        self.voted_for = hard_state.voted_for
        self.leader_id: int | None = None
        self.role = Role.FOLLOWER
        self.election_elapsed_ticks = 0
        self._heartbeat_elapsed_ticks = 0
        self._randomized_timeout_ticks = config.election_timeout_ticks
        self._votes: dict[int, bool] = {}
        self.progress: dict[int, Progress] = {}
        self._messages: list[Message] = []
        self._read_states: list[ReadState] = []
        self._reads = PendingReads(reads_max=config.read_requests_max)  # ReadIndex
        self._outstanding: Ready | None = None
        self._on_message: Callable[[Message], None] = self._step_follower
        self._on_tick: Callable[[], None] = self._tick_election
        self._persisted_hard_state = HardState(self.term, self.voted_for, commit_index)
        self._reported_soft_state: SoftState | None = None
        self.rejected_messages = 0  # impossible for this node's log: dropped (see step)
        self._transfer = LeadershipTransfer()  # leader: the follower it hands its role to
        self._become_follower(self.term, None)

    # -- public API ------------------------------------------------------------------------

    @property
    def transfer_to(self) -> int | None:
        """Leader: the follower it hands its role to, while a transfer is on."""
        return self._transfer.to_id

    def hard_state(self) -> HardState:
        return HardState(self.term, self.voted_for, self.log.committed_index)

    def soft_state(self) -> SoftState:
        return SoftState(self.role, self.leader_id, self.term)

    def tick(self) -> None:
        """One unit of logical time has passed."""
        assert self._outstanding is None, "advance() the last Ready before ticking"
        self._on_tick()

    def step(self, message: Message) -> None:
        """Handle a message from a peer (already decoded; any term, possibly stale)."""
        assert self._outstanding is None, "advance() the last Ready before stepping"
        if message.to_id != self.node_id or message.from_id not in self.config.peer_ids:
            logger.warning("node %d dropped a misaddressed message %r", self.node_id, message)
            return
        reason = self._impossible(message)
        if reason is not None:
            self.rejected_messages += 1
            if self.rejected_messages & (self.rejected_messages - 1) == 0:  # 1, 2, 4, ...
                logger.warning("node %d (t%d) rejects a %s from %d: %s (%d rejected so far)",
                               self.node_id, self.term, type(message).__name__,
                               message.from_id, reason, self.rejected_messages)
            return
        if message.term > self.term:
            if not self._accept_higher_term(message):
                return
        elif message.term < self.term:
            self._answer_stale(message)
            return
        if isinstance(message, VoteRequest):
            self._handle_vote_request(message)
        else:
            self._on_message(message)

    def _impossible(self, message: Message) -> str | None:
        """Why a message (of any term) cannot come from a correct peer, given this node's log;
        None when it may. The codec already checked what needs no state (numbers below 2**63,
        entries that chain); what is left here would otherwise reach an assertion:

        - a heartbeat's commit index is min(leader commit, what this node acknowledged), never
          beyond this node's last index (acknowledged entries are persisted, and committed ones
          are never truncated);
        - a snapshot names the same static voter set;
        - a successful append response cannot match beyond the leader's own last index.
        """
        if message.term < self.term:
            return None  # stale: answered by the term rule, never applied
        if isinstance(message, HeartbeatRequest) and message.commit_index > self.log.last_index:
            return (f"heartbeat commit index {message.commit_index} is beyond this log's last "
                    f"index {self.log.last_index}")
        if isinstance(message, SnapshotRequest) and (
                tuple(sorted(message.snapshot.voter_ids)) != tuple(sorted(self.config.voter_ids))):
            return (f"snapshot voters {message.snapshot.voter_ids} are not "
                    f"{self.config.voter_ids}")
        if (isinstance(message, AppendResponse) and message.success
                and message.term == self.term and self.role is Role.LEADER
                and message.match_index > self.log.last_index):
            return (f"match index {message.match_index} is beyond this log's last index "
                    f"{self.log.last_index}")
        return None

    def propose(self, data: bytes) -> ProposeResult:
        """Append a command to the log (leader only)."""
        assert self._outstanding is None, "advance() the last Ready before proposing"
        if self.role is not Role.LEADER:
            return ProposeResult(ProposeStatus.NOT_LEADER, leader_id=self.leader_id)
        if (self.transfer_to is not None  # the target's log must stop growing to catch up
                or self.log.last_index - self.log.committed_index
                >= self.config.uncommitted_entries_max):
            return ProposeResult(ProposeStatus.DROPPED, leader_id=self.node_id)
        entry = Entry(self.log.last_index + 1, self.term, EntryKind.NORMAL, data)
        self.log.append([entry])
        for peer in self.config.peer_ids:
            self._send_append(peer, send_empty=False)
        return ProposeResult(ProposeStatus.ACCEPTED, entry.entry_index, self.term, self.node_id)

    def read_index(self, request_id: int) -> ProposeResult:
        """Start a linearizable read; its ReadState comes out of a later Ready (leader only)."""
        assert self._outstanding is None, "advance() the last Ready before reading"
        if self.role is not Role.LEADER:
            return ProposeResult(ProposeStatus.NOT_LEADER, leader_id=self.leader_id)
        if len(self._reads) >= self.config.read_requests_max:
            return ProposeResult(ProposeStatus.DROPPED, leader_id=self.node_id)
        self._reads.add(request_id)
        self._broadcast_heartbeat()
        self._release_reads()
        return ProposeResult(ProposeStatus.ACCEPTED, 0, self.term, self.node_id)

    def campaign(self) -> None:
        """Start an election now instead of waiting for the timeout (tests, transfers)."""
        assert self._outstanding is None
        if self.role is not Role.LEADER:
            self._campaign(pre_vote=self.config.pre_vote)

    def transfer_leadership(self, to_id: int | None = None) -> int | None:
        """Hand leadership to follower `to_id` (None: the one that answered lately with the
        longest log; ties: the lowest id). Returns the target, or None when there is none
        (not the leader, a single node, an id that is not a peer). Proposals are DROPPED
        until the transfer ends: the target wins (this node steps down), or an election
        timeout passes."""
        assert self._outstanding is None, "advance() the last Ready before transferring"
        if self.role is not Role.LEADER:
            return None
        if to_id is None:
            to_id = best_target(self.progress, self.config.peer_ids)
        if to_id not in self.config.peer_ids:
            return None
        if self._transfer.start(to_id):
            logger.info("node %d (leader t%d) transfers leadership to %d", self.node_id,
                        self.term, to_id)
        if self.progress[to_id].match_index == self.log.last_index:
            self._send_timeout_now()
        else:
            self._send_append(to_id, send_empty=True)
        return to_id

    def compact(self, entry_index: int, data: bytes) -> Snapshot:
        """Drop the log up to `entry_index`, replaced by `data` (the applied state there).

        The caller persists the returned snapshot (`RaftStorage.compact`).
        """
        assert self._outstanding is None
        term = self.log.term_at(entry_index)
        assert term is not None, entry_index
        snapshot = Snapshot(entry_index, term, self.config.voter_ids, data)
        self.log.compact(snapshot)
        return snapshot

    def has_ready(self) -> bool:
        log = self.log
        return bool(
            self._messages
            or self._read_states
            or log.pending_snapshot is not None
            or log.stable_index < log.last_index
            or self.hard_state() != self._persisted_hard_state
            or self.soft_state() != self._reported_soft_state
            or log.applied_index < min(log.committed_index, log.last_index)
        )

    def ready(self) -> Ready:
        """Take the pending work. Call `advance(ready)` after handling it."""
        assert self._outstanding is None, "advance() the last Ready first"
        hard_state = self.hard_state()
        soft_state = self.soft_state()
        ready = Ready(
            soft_state=None if soft_state == self._reported_soft_state else soft_state,
            hard_state=None if hard_state == self._persisted_hard_state else hard_state,
            entries=tuple(self.log.unstable_entries()),
            snapshot=self.log.pending_snapshot,
            committed=tuple(self.log.next_committed(self.config.apply_entries_max)),
            messages=tuple(self._messages),
            read_states=tuple(self._read_states),
        )
        self._messages = []
        self._read_states = []
        self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """The shell has persisted, sent and applied `ready`."""
        assert ready is self._outstanding, "advance() takes the Ready last returned"
        self._outstanding = None
        if ready.soft_state is not None:
            self._reported_soft_state = ready.soft_state
        if ready.hard_state is not None:
            self._persisted_hard_state = ready.hard_state
        if ready.snapshot is not None:
            self.log.snapshot_persisted()
        if ready.entries:
            self.log.stable_to(ready.entries[-1].entry_index)
        if ready.committed:
            self.log.applied_to(ready.committed[-1].entry_index)
        # The leader's own entries count toward a majority only once they are on its disk.
        if (self.role is Role.LEADER
                and self.progress[self.node_id].maybe_update(self.log.stable_index)):
            self._maybe_commit_and_broadcast()

    # -- role changes ----------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.voted_for = None
        self.leader_id = None
        self.election_elapsed_ticks = 0
        self._heartbeat_elapsed_ticks = 0
        timeout = self.config.election_timeout_ticks
        self._randomized_timeout_ticks = timeout + self._rng.randrange(timeout)
        self._votes = {}
        self.progress = {}
        self._reads.clear()  # callers time out and retry at the new leader
        self._transfer.clear()

    def _become_follower(self, term: int, leader_id: int | None) -> None:
        self._reset(term)
        self.leader_id = leader_id
        self._set_role(Role.FOLLOWER, self._step_follower, self._tick_election)

    def _become_pre_candidate(self) -> None:
        # The term does not change and nobody is voted for: a pre-vote promises nothing.
        self._votes = {}
        self.leader_id = None
        self._set_role(Role.PRE_CANDIDATE, self._step_candidate, self._tick_election)

    def _become_candidate(self) -> None:
        self._reset(self.term + 1)
        self.voted_for = self.node_id
        self._set_role(Role.CANDIDATE, self._step_candidate, self._tick_election)

    def _become_leader(self) -> None:
        self._reset(self.term)
        self.leader_id = self.node_id
        for voter in self.config.voter_ids:
            self.progress[voter] = Progress(self.log.last_index + 1)
        own = self.progress[self.node_id]
        own.maybe_update(self.log.stable_index)
        own.become_replicate()
        self._set_role(Role.LEADER, self._step_leader, self._tick_heartbeat)
        self.log.append([Entry(self.log.last_index + 1, self.term, EntryKind.NOOP, b"")])
        self._broadcast_append()

    def _set_role(
        self, role: Role, on_message: Callable[[Message], None], on_tick: Callable[[], None]
    ) -> None:
        if role is not self.role:
            logger.info("node %d became %s at term %d", self.node_id, role.value, self.term)
        self.role = role
        self._on_message = on_message
        self._on_tick = on_tick

    def _campaign(self, pre_vote: bool, *, transfer: bool = False) -> None:
        if pre_vote:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
        if self._record_vote(self.node_id, granted=True):
            return  # a single-node cluster wins at once
        for peer in self.config.peer_ids:
            self._send(VoteRequest(
                self.node_id, peer, vote_term, pre_vote, self.log.last_index, self.log.last_term,
                transfer,
            ))

    def _record_vote(self, voter: int, *, granted: bool) -> bool:
        """Count a vote; on a decision change role. Returns whether the campaign is decided."""
        self._votes.setdefault(voter, granted)
        quorum = self.config.quorum_size
        granted_count = sum(1 for vote in self._votes.values() if vote)
        if granted_count >= quorum:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False)
            else:
                self._become_leader()
            return True
        if len(self._votes) - granted_count > len(self.config.voter_ids) - quorum:
            self._become_follower(self.term, None)
            return True
        return False

    # -- ticks -----------------------------------------------------------------------------

    def _tick_election(self) -> None:
        self.election_elapsed_ticks += 1
        if self.election_elapsed_ticks >= self._randomized_timeout_ticks:
            self.election_elapsed_ticks = 0
            self._campaign(pre_vote=self.config.pre_vote)

    def _tick_heartbeat(self) -> None:
        config = self.config
        self.election_elapsed_ticks += 1
        self._heartbeat_elapsed_ticks += 1
        given_up = self._transfer.tick(config.election_timeout_ticks)
        if given_up is not None:
            logger.info("node %d (leader t%d) gives up the transfer to %d", self.node_id,
                        self.term, given_up)
        if self.election_elapsed_ticks >= config.election_timeout_ticks:
            self.election_elapsed_ticks = 0
            if config.check_quorum:
                if not self._quorum_active():
                    logger.info("node %d lost contact with a majority", self.node_id)
                    self._become_follower(self.term, None)
                    return
                for peer in config.peer_ids:
                    self.progress[peer].recent_active = False
        for peer in config.peer_ids:
            progress = self.progress[peer]
            if progress.state is ProgressState.SNAPSHOT:
                progress.snapshot_elapsed_ticks += 1
                if progress.snapshot_elapsed_ticks >= config.election_timeout_ticks:
                    progress.become_probe()  # the snapshot may be lost: offer it again
        if self._heartbeat_elapsed_ticks >= config.heartbeat_interval_ticks:
            self._heartbeat_elapsed_ticks = 0
            self._broadcast_heartbeat()

    def _quorum_active(self) -> bool:
        active = 1 + sum(1 for peer in self.config.peer_ids if self.progress[peer].recent_active)
        return active >= self.config.quorum_size

    # -- term rules and votes (every role) -------------------------------------------------

    def _accept_higher_term(self, message: Message) -> bool:
        """Apply the higher-term rule. Returns whether to go on handling the message."""
        if isinstance(message, VoteRequest):
            in_lease = (
                not message.transfer  # the leader asked for this election (TimeoutNow)
                and self.config.check_quorum
                and self.leader_id is not None
                and self.election_elapsed_ticks < self.config.election_timeout_ticks
            )
            if in_lease:
                return False  # we heard from a live leader: ignore the disruptive candidate
            if message.pre_vote:
                return True  # a pre-vote never changes anyone's term
        elif isinstance(message, VoteResponse) and message.pre_vote and message.granted:
            return True  # carries the term we would campaign in, not a newer term
        leader = message.from_id if isinstance(message, FROM_LEADER) else None
        self._become_follower(message.term, leader)
        return True

    def _answer_stale(self, message: Message) -> None:
        """A message of an older term: tell a stale leader or pre-candidate about our term."""
        if isinstance(message, (AppendRequest, HeartbeatRequest)):
            # Without this, a leader cut off by check-quorum/pre-vote could stay stuck (etcd).
            self._send(AppendResponse(self.node_id, message.from_id, self.term, False, 0, 0, 0, 0))
        elif isinstance(message, VoteRequest) and message.pre_vote:
            self._send(VoteResponse(self.node_id, message.from_id, self.term, True, False))

    def _can_vote(self, message: VoteRequest) -> bool:
        return (
            self.voted_for == message.from_id
            or (self.voted_for is None and self.leader_id is None)
            or (message.pre_vote and message.term > self.term)
        )

    def _handle_vote_request(self, message: VoteRequest) -> None:
        if self._can_vote(message) and self.log.is_up_to_date(
            message.last_index, message.last_term
        ):
            self._send(VoteResponse(self.node_id, message.from_id, message.term,
                                    message.pre_vote, True))
            if not message.pre_vote:
                self.election_elapsed_ticks = 0
                self.voted_for = message.from_id
        else:
            self._send(VoteResponse(self.node_id, message.from_id, self.term,
                                    message.pre_vote, False))

    # -- follower and candidates -----------------------------------------------------------

    def _step_follower(self, message: Message) -> None:
        if isinstance(message, FROM_LEADER):
            self.election_elapsed_ticks = 0
            self.leader_id = message.from_id
            if isinstance(message, AppendRequest):
                self._handle_append(message)
            elif isinstance(message, HeartbeatRequest):
                self.log.commit_to(message.commit_index)
                self._send(HeartbeatResponse(self.node_id, message.from_id, self.term,
                                             message.read_seq))
            else:
                self._handle_snapshot(message)
        elif isinstance(message, TimeoutNow):
            logger.info("node %d campaigns at once: leader %d hands over (t%d)", self.node_id,
                        message.from_id, self.term)
            self._campaign(pre_vote=False, transfer=True)

    def _step_candidate(self, message: Message) -> None:
        if isinstance(message, FROM_LEADER):
            self._become_follower(self.term, message.from_id)  # someone won this term
            self._step_follower(message)
            return
        if not isinstance(message, VoteResponse):
            return
        pre_candidate = self.role is Role.PRE_CANDIDATE
        if message.pre_vote != pre_candidate:
            return
        if pre_candidate and message.granted and message.term != self.term + 1:
            return  # a grant from an older pre-vote round
        self._record_vote(message.from_id, granted=message.granted)

"""Leadership transfer (Raft thesis §3.10): the leader's side of a hand-over, as its own state.

`RaftNode.transfer_leadership(to_id)` starts one. The leader refuses new proposals (DROPPED),
brings the chosen follower's log up to its own last index, then sends it TimeoutNow; the
follower campaigns at once, without a pre-vote, and its vote requests say `transfer`, so voters
that still hear the leader grant them (the leader asked for it) and the old leader steps down
on the higher term. A stop then costs one round trip instead of an election timeout.

    IDLE --transfer_leadership(to)--> CATCHING UP --target holds the last entry--> TIMEOUT_NOW
     ^                                    |   (held already: straight on)                SENT
     |                                    |                                               |
     +---- an election timeout passed (the target may be gone), or this node stopped -----+
           leading: proposals are taken again. Naming another target starts over.

Safety is the ordinary election's: the vote still needs an up-to-date log and a majority.

Why a module of its own: a hand-over is a small state machine (which target, since when,
whether TimeoutNow already left) that sits across both halves of the node without being either.
Replication (replication.py) sends TimeoutNow once the target has caught up; election (core.py)
handles the other end, a follower's TimeoutNow and the `transfer` flag that lifts leader
stickiness. Kept here, neither half holds the hand-over's bookkeeping. Sans-IO like the rest of
`controller.raft`: `RaftNode` feeds it ticks and gets back the TimeoutNow to send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.raft.messages import TimeoutNow
from controller.raft.progress import Progress

__all__ = ["LeadershipTransfer", "best_target"]


def best_target(progress: Mapping[int, Progress], peer_ids: Sequence[int]) -> int | None:
    """The follower that answered lately with the longest log (ties: the lowest id); None
    without peers."""
    if not peer_ids:
        return None
    return min(peer_ids, key=lambda peer: (not progress[peer].recent_active,
                                           -progress[peer].match_index, peer))


class LeadershipTransfer:
    """A leader's hand-over to one follower, from its start to TimeoutNow or giving up."""

    __slots__ = ("_elapsed_ticks", "_timeout_now_sent", "to_id")

    def __init__(self) -> None:
        self.to_id: int | None = None  # the follower the leader hands its role to
        self._elapsed_ticks = 0
        self._timeout_now_sent = False

    def start(self, to_id: int) -> bool:
        """Aim at `to_id`. Returns whether that is a new transfer (another target, or none
        before): the clock restarts and TimeoutNow may leave again."""
        if self.to_id == to_id:
            return False
        self.to_id, self._timeout_now_sent = to_id, False
        self._elapsed_ticks = 0
        return True

    def clear(self) -> None:
        """No transfer (a new term, a new role, or given up)."""
        self.to_id, self._timeout_now_sent = None, False

    def tick(self, timeout_ticks: int) -> int | None:
        """One leader tick. Returns the target given up once `timeout_ticks` passed."""
        if self.to_id is None:
            return None
        self._elapsed_ticks += 1
        if self._elapsed_ticks < timeout_ticks:
            return None
        given_up = self.to_id
        self.clear()
        return given_up

    def timeout_now(self, from_id: int, term: int) -> TimeoutNow | None:
        """The TimeoutNow to send, once per transfer: a second one would start a second
        election (a new term)."""
        if self.to_id is None or self._timeout_now_sent:
            return None
        self._timeout_now_sent = True
        return TimeoutNow(from_id, self.to_id, term)

"""Raft's values: log entries, hard state, snapshots, the messages peers exchange, and Ready.

Words: `entry_index` is a position in the Raft log (1-based; 0 means "before the first entry"),
`term` is a Raft term. Node ids are positive ints; `None` means "no node" (no vote, no leader).

Messages (every one carries `from_id`, `to_id` and the sender's `term`):

    VoteRequest        candidate -> voter   pre_vote, last_index, last_term
    VoteResponse       voter -> candidate   pre_vote, granted
    AppendRequest      leader -> follower   prev_index, prev_term, entries, commit_index
    AppendResponse     follower -> leader   success, match_index | reject_index, hint_index,
                                            hint_term
    HeartbeatRequest   leader -> follower   commit_index, read_seq
    HeartbeatResponse  follower -> leader   read_seq (echoed: confirms leadership for ReadIndex)
    SnapshotRequest    leader -> follower   snapshot (answered with an AppendResponse)
    TimeoutNow         leader -> follower   (leadership transfer, thesis §3.10: campaign now)

A vote request with `transfer` set comes from a TimeoutNow: voters grant it even while they
hear from a leader (that leader asked for it), so leader stickiness does not refuse it.

A pre-vote request carries the term the candidate *would* use (its term + 1) without anyone
changing term; a granted pre-vote answer carries that same term, a refusal the voter's own term.
"""

from __future__ import annotations

import dataclasses
import enum

__all__ = [
    "AppendRequest",
    "AppendResponse",
    "Entry",
    "EntryKind",
    "HardState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Message",
    "ProposeResult",
    "ProposeStatus",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotRequest",
    "SoftState",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
]


class EntryKind(enum.IntEnum):
    NORMAL = 0  # an application command (opaque bytes)
    NOOP = 1  # the empty entry a new leader appends at the start of its term (Raft §8)


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    entry_index: int
    term: int
    kind: EntryKind
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class HardState:
    """What must be on disk (fsynced) before a node sends anything that depends on it."""

    term: int
    voted_for: int | None
    commit_index: int


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine as of `entry_index` (the last entry it includes) and that entry's term."""

    entry_index: int
    term: int
    voter_ids: tuple[int, ...]
    data: bytes


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclasses.dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state the shell may want to know (never persisted)."""

    role: Role
    leader_id: int | None
    term: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReadState:
    """A ReadIndex answer: serve read `request_id` once the state machine applied `entry_index`."""

    request_id: int
    entry_index: int


class ProposeStatus(enum.Enum):
    ACCEPTED = "accepted"
    NOT_LEADER = "not_leader"  # redirect to `leader_id` (None when unknown)
    DROPPED = "dropped"  # too many uncommitted entries, or a leadership transfer: retry later


@dataclasses.dataclass(frozen=True, slots=True)
class ProposeResult:
    status: ProposeStatus
    entry_index: int = 0  # where the proposal went (ACCEPTED only)
    term: int = 0
    leader_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class VoteRequest:
    from_id: int
    to_id: int
    term: int
    pre_vote: bool
    last_index: int
    last_term: int
    transfer: bool = False  # sent on a TimeoutNow (absent from an older peer: False)


@dataclasses.dataclass(frozen=True, slots=True)
class VoteResponse:
    from_id: int
    to_id: int
    term: int
    pre_vote: bool
    granted: bool


@dataclasses.dataclass(frozen=True, slots=True)
class AppendRequest:
    from_id: int
    to_id: int
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit_index: int


@dataclasses.dataclass(frozen=True, slots=True)
class AppendResponse:
    """success: the follower's log matches the leader's up to `match_index`.

    Refusal: `reject_index` is the prev_index that did not match; the follower's log has no entry
    after `hint_index` whose term is <= the request's prev_term (`hint_term` is that entry's term),
    which lets the leader skip whole conflicting terms (Raft §5.3, last paragraph).
    """

    from_id: int
    to_id: int
    term: int
    success: bool
    match_index: int
    reject_index: int
    hint_index: int
    hint_term: int


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    from_id: int
    to_id: int
    term: int
    commit_index: int  # min(leader commit, what the follower is known to hold)
    read_seq: int


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    from_id: int
    to_id: int
    term: int
    read_seq: int


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotRequest:
    from_id: int
    to_id: int
    term: int
    snapshot: Snapshot


@dataclasses.dataclass(frozen=True, slots=True)
class TimeoutNow:
    """The leader hands its role to `to_id`, whose log matches its own: start an election at
    once, without a pre-vote (thesis §3.10)."""

    from_id: int
    to_id: int
    term: int


Message = (
    VoteRequest
    | VoteResponse
    | AppendRequest
    | AppendResponse
    | HeartbeatRequest
    | HeartbeatResponse
    | SnapshotRequest
    | TimeoutNow
)


@dataclasses.dataclass(frozen=True, slots=True)
class Ready:
    """One batch of work for the shell, handled in this order (see `controller.raft.core`):

    1. persist: `snapshot` (replaces the whole log), then `entries` (the first one may overwrite
       persisted entries from its index on), then `hard_state`; fsync;
    2. send `messages`;
    3. apply `snapshot` to the state machine (when set), then `committed` entries in order;
       answer `read_states` once their entry is applied;
    4. call `advance(ready)`.
    """

    soft_state: SoftState | None
    hard_state: HardState | None
    entries: tuple[Entry, ...]
    snapshot: Snapshot | None
    committed: tuple[Entry, ...]
    messages: tuple[Message, ...]
    read_states: tuple[ReadState, ...]

    def must_sync(self) -> bool:
        """Whether step 1 has anything to write (and so to fsync)."""
        return bool(self.entries) or self.hard_state is not None or self.snapshot is not None

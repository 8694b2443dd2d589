"""What operators read about the controllers: `cluster_list` and `controller_status`; and
`transfer_leader`, the one thing they steer in the Raft group (thesis §3.10: the leader hands
its role to a follower, which wins at once instead of after an election timeout).

`controller_status` is answered by any node with its own view (no redirect), so it also serves
to find the leader; `cluster_list` is the leader's view of controllers and replica sets.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from controller.api.codec import JsonMessage
from controller.api.replicas import ReplicaInfo

__all__ = ["ClusterListReply", "ControllerMember", "ControllerStatusReply", "ElectionRecord",
           "ReplicaSetStatus", "TransferLeaderReply", "TransferLeaderRequest"]


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerMember(JsonMessage):
    KIND: ClassVar[str] = "controller member"
    node_id: int
    address: str  # the client endpoint (host:port)
    role: str  # leader | follower | candidate | pre_candidate | unknown


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaSetStatus(JsonMessage):
    KIND: ClassVar[str] = "replica set status"
    replica: ReplicaInfo
    alive_broker_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterListReply(JsonMessage):
    KIND: ClassVar[str] = "cluster_list reply"
    status: str
    leader_address: str | None = None
    controllers: tuple[ControllerMember, ...] = ()
    replica_sets: tuple[ReplicaSetStatus, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeaderRequest(JsonMessage):
    KIND: ClassVar[str] = "transfer_leader request"
    to_node_id: int | None = None  # None: the follower with the longest log


@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeaderReply(JsonMessage):
    """OK: `leader_id` leads at `term` now; LEADER_TRANSFER_FAILED: the old leader (`from_node_id`)
    leads again (the target did not win within an election timeout); INVALID_REQUEST: the
    target is not a follower of this group."""

    KIND: ClassVar[str] = "transfer_leader reply"
    status: str
    leader_address: str | None = None
    from_node_id: int = 0
    leader_id: int | None = None
    term: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ElectionRecord(JsonMessage):
    """A master election applied by the controller (for operators: console, status)."""

    KIND: ClassVar[str] = "election record"
    broker_name: str
    master_epoch: int  # the epoch the election opened
    master_broker_id: int | None  # None: the set was left without a master
    master_address: str | None
    entry_index: int  # the Raft entry that carried it
    applied_at_ms: int  # wall clock of the node that reports it (display only)


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerStatusReply(JsonMessage):
    """This node's own view (no redirect): used to find the leader and by `status --json`."""

    KIND: ClassVar[str] = "controller_status reply"
    status: str
    node_id: int = 0
    role: str = "unknown"
    term: int = 0
    leader_id: int | None = None
    leader_address: str | None = None
    commit_index: int = 0
    applied_index: int = 0
    snapshot_index: int = 0  # the log is compacted up to here
    state_digest: str = ""  # of the applied replicated state: equal on every caught-up node
    # hostile or broken input since start (issue 16): Raft messages impossible for this node's
    # log, frames that did not decode, inbound Raft connections refused or closed by a limit
    rejected_messages: int = 0
    bad_frames: int = 0
    refused_connections: int = 0
    # for operators (console, metrics): this node's last master elections applied, oldest
    # first, and how often this node saw the Raft leader change
    recent_elections: tuple[ElectionRecord, ...] = ()
    leader_changes: int = 0
    version: str = ""  # the release this node runs (conf/version.py; "": an older node)

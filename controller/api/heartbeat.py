"""How a broker joins and stays known: `register_broker` and the 1 s `broker_heartbeat`.

The heartbeat is soft state (never in the Raft log): every controller keeps its own liveness
table from it (controller/liveness.py), and the leader's reply carries the broker's role and
the facts its master lease is computed from (`lease_max_ms`, the clock echo that
liveness.heartbeat_credit_ms credits a late heartbeat by).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from controller.api.codec import JsonMessage
from controller.api.replicas import ReplicaInfo, RoleChange
from controller.api.routes import TopicInfo

__all__ = ["BrokerHeartbeat", "HeartbeatReply", "RegisterBrokerReply", "RegisterBrokerRequest",
           "lease_max_ms"]


def lease_max_ms(heartbeat_timeout_ms: int) -> int:
    """The longest master lease a controller reply can give (docs/design.md §5.7,
    ha/replication/master_core.py):
    2/3 of controllerHeartbeatTimeoutMs past the heartbeat's send time, so it has lapsed
    before the controller could replace a master that went silent, with a third to spare for
    clock rates and a deposed Raft leader's last replies. The broker takes the smaller of
    this and its masterLeaseMs; a controller that replaces a master which still heartbeats
    (an operator's election) waits this long after its last reply naming it."""
    return heartbeat_timeout_ms * 2 // 3


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterBrokerRequest(JsonMessage):
    """Get (or get back) a broker id in a replica set; the address identifies the replica."""

    KIND: ClassVar[str] = "register_broker request"
    cluster_name: str
    broker_name: str
    broker_address: str
    protocol: str = ""  # the broker's protocol version text (conf/protocol.py); "": 0.1


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterBrokerReply(JsonMessage):
    KIND: ClassVar[str] = "register_broker reply"
    status: str  # VERSION_REFUSED: the rule of conf/protocol.py refused the pair
    leader_address: str | None = None
    broker_id: int = -1
    replica: ReplicaInfo | None = None
    protocol: str = ""  # the controller's protocol version text; "": 0.1


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerHeartbeat(JsonMessage):
    """Every `brokerHeartbeatInterval` (1 s); not written to the Raft log."""

    KIND: ClassVar[str] = "broker_heartbeat request"
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    master_epoch: int = 0  # the epoch of the last entry in the broker's epoch file
    max_log_position: int = 0
    confirm_log_position: int = 0
    election_priority: int = 2**31 - 1  # lower wins (brokerElectionPriority)
    topics: tuple[TopicInfo, ...] = ()
    # A slave whose HA link to the master of this epoch is down (0: none): the leader probes
    # that master at once instead of waiting for its heartbeats to time out.
    master_unreachable_epoch: int = 0
    # A master whose lease had lapsed (by its own clock) when this heartbeat was made; its
    # positions were read after that (an operator's election waits for it)
    master_lease_lapsed: bool = False
    # The master of this epoch refuses to continue it (0: none): it restarted since the epoch
    # began, so its log may have lost a tail its slaves hold; the leader elects again at once
    # (a new epoch; this broker may win it again)
    master_epoch_abandoned: int = 0
    # The echo of this controller's last reply to the broker (liveness.heartbeat_credit_ms):
    # its `controller_ms` and `controller_clock`, and how long before making this heartbeat
    # the broker received it (0, 0, 0: none, or an older broker)
    echo_controller_ms: int = 0
    echo_controller_clock: int = 0
    echo_age_ms: int = 0
    # Lame duck: the broker is about to stop (a handover, a planned restart): no election
    # picks it while another member can take the role (controller/election.py)
    leaving: bool = False
    protocol: str = ""  # the broker's protocol version text (conf/protocol.py); "": 0.1


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatReply(JsonMessage):
    KIND: ClassVar[str] = "broker_heartbeat reply"
    status: str
    leader_address: str | None = None
    role: RoleChange | None = None  # the leader's view, so a role change arrives within 1 s
    # the controller's controllerHeartbeatTimeoutMs: a master's lease must end before it
    # (0: not said, from an older controller)
    heartbeat_timeout_ms: int = 0
    # the set's master has not heartbeated for half of controllerHeartbeatTimeoutMs: an
    # election may come, so heartbeat often (the elected slave then learns its role at once)
    master_silent: bool = False
    # the version of the users and ACLs (AuthData): a broker whose copy is older fetches
    # them with get_auth_data
    auth_version: int = 0
    # The controller's monotonic clock when it took the heartbeat, and an id of that clock
    # (random per controller process): the broker echoes both in its next heartbeat
    controller_ms: int = 0
    controller_clock: int = 0
    # The heartbeat counted as made this long before it arrived (it spent longer on the way
    # than heartbeatTransitMaxMs allows): a master's lease from it starts this much earlier
    # than its send time (liveness.heartbeat_credit_ms; 0 from an older controller)
    credit_behind_ms: int = 0
    protocol: str = ""  # the controller's protocol version text; "": 0.1

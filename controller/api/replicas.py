"""Replica sets as the controller's replicated state holds them, and the requests about one.

`ReplicaInfo` is what the state machine keeps per replica set (members, master, epochs,
SyncStateSet); `role_of` turns it into the `RoleChange` a broker acts on. The requests here
read or change one set: `get_replica_info`, `alter_sync_state_set` (a master changes its
SyncStateSet, fenced by both epochs), and the operator's `elect_master` and
`clean_broker_data`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from controller.api.codec import JsonMessage

__all__ = ["MEMBERS_MAX", "ROLE_MASTER", "ROLE_NONE", "ROLE_SLAVE", "AlterSyncStateSetReply",
           "AlterSyncStateSetRequest", "BrokerMember", "CleanBrokerDataRequest",
           "ElectMasterRequest", "GetReplicaInfoRequest", "HandoverRequest", "ReplicaInfo",
           "ReplicaInfoReply", "RoleChange", "role_of"]

ROLE_MASTER = "master"
ROLE_SLAVE = "slave"
ROLE_NONE = "none"  # registered, but the set has no master (or the broker is not in it)
MEMBERS_MAX = 64  # brokers per replica set, members of a SyncStateSet


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerMember(JsonMessage):
    KIND: ClassVar[str] = "broker member"
    broker_id: int
    broker_address: str


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfo(JsonMessage):
    """One replica set as the controller's replicated state has it."""

    KIND: ClassVar[str] = "replica info"
    cluster_name: str
    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int
    brokers: tuple[BrokerMember, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RoleChange(JsonMessage):
    """What a broker should be now (computed from a ReplicaInfo; pushed or polled)."""

    KIND: ClassVar[str] = "role change"
    broker_name: str
    broker_id: int
    role: str
    master_epoch: int
    master_broker_id: int | None
    master_address: str | None
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int


def role_of(replica: ReplicaInfo, broker_id: int) -> RoleChange:
    if replica.master_broker_id == broker_id:
        role = ROLE_MASTER
    elif replica.master_broker_id is not None:
        role = ROLE_SLAVE
    else:
        role = ROLE_NONE
    return RoleChange(replica.broker_name, broker_id, role, replica.master_epoch,
                      replica.master_broker_id, replica.master_address, replica.sync_state_set,
                      replica.sync_state_set_epoch)


# -- broker -> controller ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GetReplicaInfoRequest(JsonMessage):
    KIND: ClassVar[str] = "get_replica_info request"
    broker_name: str


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfoReply(JsonMessage):
    KIND: ClassVar[str] = "replica info reply"
    status: str
    leader_address: str | None = None
    replica: ReplicaInfo | None = None
    alive_broker_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class AlterSyncStateSetRequest(JsonMessage):
    """The master asks to change its SyncStateSet, fenced by both epochs."""

    KIND: ClassVar[str] = "alter_sync_state_set request"
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class AlterSyncStateSetReply(JsonMessage):
    KIND: ClassVar[str] = "alter_sync_state_set reply"
    status: str
    leader_address: str | None = None
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0


# -- admin -> controller -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ElectMasterRequest(JsonMessage):
    KIND: ClassVar[str] = "elect_master request"
    broker_name: str
    designated_broker_id: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class HandoverRequest(JsonMessage):
    """A master that stopped taking puts asks the controller to elect `target_broker_id`, a
    slave that (by the master's count) has acked its whole log (controller/handover.py)."""

    KIND: ClassVar[str] = "handover_master request"
    broker_name: str
    broker_id: int
    broker_address: str
    master_epoch: int
    sealed_log_position: int  # the master's log end once no put was in flight or admitted
    target_broker_id: int
    target_acked_log_position: int  # the target's ack, as the master's HA link counts it


@dataclasses.dataclass(frozen=True, slots=True)
class CleanBrokerDataRequest(JsonMessage):
    """Forget brokers of a set (all of them when `broker_ids` is empty); alive ones refuse."""

    KIND: ClassVar[str] = "clean_broker_data request"
    broker_name: str
    broker_ids: tuple[int, ...] = ()

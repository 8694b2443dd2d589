"""The action table: each controller action's request and reply types, and the statuses.

`controller/service.py` decodes a request with `ACTIONS[action][0]` and the broker side
decodes the reply with `ACTIONS[action][1]`; the table in the package docstring
(`controller.api`) says the same in words.
"""

from __future__ import annotations

from controller.api.cluster import (
    ClusterListReply,
    ControllerStatusReply,
    TransferLeaderReply,
    TransferLeaderRequest,
)
from controller.api.codec import JsonMessage
from controller.api.heartbeat import (
    BrokerHeartbeat,
    HeartbeatReply,
    RegisterBrokerReply,
    RegisterBrokerRequest,
)
from controller.api.replicas import (
    AlterSyncStateSetReply,
    AlterSyncStateSetRequest,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetReplicaInfoRequest,
    HandoverRequest,
    ReplicaInfoReply,
)
from controller.api.routes import GetRoutesRequest, RoutesReply
from controller.api.users import (
    AclDeleteRequest,
    AclListReply,
    AclListRequest,
    AclRequest,
    AuthChangeReply,
    AuthDataReply,
    UserNameRequest,
    UserRequest,
    UsersReply,
)

__all__ = ["ACTIONS", "STATUSES"]

STATUSES = (
    "OK", "NOT_LEADER", "MASTER_STILL_EXIST", "MASTER_NOT_AVAILABLE", "ELECT_MASTER_FAILED",
    "FENCED_MASTER_EPOCH", "FENCED_SYNC_STATE_SET_EPOCH", "INVALID_MASTER", "INVALID_REPLICAS",
    "BROKER_NOT_REGISTERED", "REPLICA_SET_NOT_FOUND", "BROKER_ALIVE", "TOPIC_NOT_FOUND", "BUSY",
    "INVALID_REQUEST", "INTERNAL_ERROR", "FENCED_AUTH_VERSION", "NO_PERMISSION",
    "UNAUTHENTICATED", "VERSION_REFUSED", "LEADER_TRANSFER_FAILED",
)


ACTIONS: dict[str, tuple[type[JsonMessage] | None, type[JsonMessage]]] = {
    "register_broker": (RegisterBrokerRequest, RegisterBrokerReply),
    "broker_heartbeat": (BrokerHeartbeat, HeartbeatReply),
    "get_replica_info": (GetReplicaInfoRequest, ReplicaInfoReply),
    "alter_sync_state_set": (AlterSyncStateSetRequest, AlterSyncStateSetReply),
    "elect_master": (ElectMasterRequest, ReplicaInfoReply),
    "clean_broker_data": (CleanBrokerDataRequest, ReplicaInfoReply),
    "handover_master": (HandoverRequest, ReplicaInfoReply),
    "get_routes": (GetRoutesRequest, RoutesReply),
    "cluster_list": (None, ClusterListReply),
    "controller_status": (None, ControllerStatusReply),
    "transfer_leader": (TransferLeaderRequest, TransferLeaderReply),
    "get_auth_data": (None, AuthDataReply),
    "user_create": (UserRequest, AuthChangeReply),
    "user_update": (UserRequest, AuthChangeReply),
    "user_delete": (UserNameRequest, AuthChangeReply),
    "user_list": (None, UsersReply),
    "acl_create": (AclRequest, AuthChangeReply),
    "acl_update": (AclRequest, AuthChangeReply),
    "acl_delete": (AclDeleteRequest, AuthChangeReply),
    "acl_list": (AclListRequest, AclListReply),
}

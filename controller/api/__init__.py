"""What brokers and admin tools exchange with the controller (messages only; a leaf package).

Transport: Arrow Flight `DoAction(type, JSON body)` on the controller's client endpoint; the
result is one JSON object. Every reply carries `"status"`; anything but `OK` is an expected
outcome, not an exception:

    action                 request                    reply (besides "status")
    register_broker        RegisterBrokerRequest      RegisterBrokerReply
    broker_heartbeat       BrokerHeartbeat            HeartbeatReply (role learned here)
    get_replica_info       GetReplicaInfoRequest      ReplicaInfoReply
    alter_sync_state_set   AlterSyncStateSetRequest   AlterSyncStateSetReply
    elect_master           ElectMasterRequest         ReplicaInfoReply
    clean_broker_data      CleanBrokerDataRequest     ReplicaInfoReply (replica None when gone)
    handover_master        HandoverRequest            ReplicaInfoReply (a master's own call)
    get_routes             GetRoutesRequest           RoutesReply
    cluster_list           {}                         ClusterListReply
    controller_status      {}                         ControllerStatusReply (any node answers)
    transfer_leader        TransferLeaderRequest      TransferLeaderReply (the Raft leader hands
                                                      its role to a follower: thesis §3.10)
    get_auth_data          {}                         AuthDataReply (users with secrets, ACLs:
                                                      members and Super users only)
    user_create|update     UserRequest                AuthChangeReply (through Raft)
    user_delete            UserNameRequest            AuthChangeReply
    user_list              {}                         UsersReply (no secrets)
    acl_create|update      AclRequest                 AuthChangeReply
    acl_delete             AclDeleteRequest           AuthChangeReply
    acl_list               AclListRequest             AclListReply

Users and ACLs (issue 16): `conf.acl` (re-exported here) is their model and the one
decision function, so a broker decides exactly as the controller does; with authentication on
every call is signed (conf/signing.py) and refused with `controller error
UNAUTHENTICATED` / `NO_PERMISSION` (Flight errors, not statuses) before it reaches the node.

Statuses (RocketMQ's controller response codes, without the CONTROLLER_ prefix):
`OK`; `NOT_LEADER` (this node does not lead; `leader_address` says who does, if known: call
again there); `MASTER_STILL_EXIST` (an election kept the alive master); `MASTER_NOT_AVAILABLE`
(no eligible replica: the set has no master now); `ELECT_MASTER_FAILED` (a designated broker is
not eligible); `FENCED_MASTER_EPOCH` / `FENCED_SYNC_STATE_SET_EPOCH` (the request's epoch is not
the current one); `INVALID_MASTER` (the requester is not the current master); `INVALID_REPLICAS`
(a proposed SyncStateSet member is unknown, not alive, or the set lacks the master);
`BROKER_NOT_REGISTERED`; `REPLICA_SET_NOT_FOUND`; `INVALID_REQUEST` (e.g. a set of another
cluster, too many members); `BROKER_ALIVE` (refused to clean a broker that
still heartbeats); `TOPIC_NOT_FOUND`; `BUSY` (the Raft log is full or slow: retry);
`INTERNAL_ERROR` (the request hit a case the controller did not foresee: it is logged there,
the request failed alone, the controller keeps serving); `FENCED_AUTH_VERSION` (a user/ACL
change raced another one three times: retry); `LEADER_TRANSFER_FAILED` (the follower named
did not win within an election timeout: the old leader leads again).

How a broker in controller mode uses this (RocketMQ's ReplicasManager, simplified):
1. `register_broker` with its client address at the leader (follow `NOT_LEADER` /
   `leader_address`; `controller_status` on any node names the leader): the reply's
   `broker_id` is stable for that address, so a restart gets the same id back.
2. Every `brokerHeartbeatInterval` (1 s) send `broker_heartbeat` to *every* controller (each
   keeps its own liveness table, so a new leader knows who is alive), from the registered
   address, with the epoch of its last log entry, its max and confirm log positions and the
   topics it serves. The leader's reply carries `role` (a RoleChange): become master (take
   over) or slave of `master_address` when `master_epoch` is newer than the one it runs.
3. As master, ask `alter_sync_state_set` with the current `master_epoch` and
   `sync_state_set_epoch`, and use the set in the reply (fenced replies mean: refresh with
   `get_replica_info`). The set already held is accepted too, as a new `sync_state_set_epoch`:
   a master proposes it to fence an earlier proposal that may still be in flight. A master
   named in an epoch that may predate its process (it restarted) sets `master_epoch_abandoned`
   in its heartbeats instead of taking over: the leader elects again under a new epoch. A set
   without a master gets one from the leader's own scan (or an explicit `elect_master`).

Each message is a frozen dataclass with `to_json()` / `from_json(body)`; `from_json` checks
every field's type and raises `CodecError` naming the message and the field, so a bad request
is refused without harming the service. A broker learns its role from `role_of(replica, id)`.

Modules, by message family (import from here, not from them; nothing here imports pyarrow):

    codec.py      JsonMessage: the shared JSON codec and its limits
    replicas.py   ReplicaInfo, RoleChange / role_of; get_replica_info, alter_sync_state_set,
                  elect_master, clean_broker_data
    heartbeat.py  register_broker, broker_heartbeat, lease_max_ms
    routes.py     TopicInfo, get_routes
    cluster.py    cluster_list, controller_status (for operators)
    users.py      users and ACLs (their model, conf.acl, is re-exported here)
    actions.py    ACTIONS (action -> request and reply types) and STATUSES
"""

from __future__ import annotations

from conf.acl import (
    ADMIN_OPERATIONS,
    OPERATIONS,
    AclError,
    AuthData,
    Policy,
    User,
    authorize,
    decide,
    requirement_of,
)
from controller.api.actions import (
    ACTIONS,
    STATUSES,
)
from controller.api.cluster import (
    ClusterListReply,
    ControllerMember,
    ControllerStatusReply,
    ElectionRecord,
    ReplicaSetStatus,
    TransferLeaderReply,
    TransferLeaderRequest,
)
from controller.api.codec import (
    NAME_BYTES_MAX,
    TOPICS_MAX,
    JsonMessage,
)
from controller.api.heartbeat import (
    BrokerHeartbeat,
    HeartbeatReply,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    lease_max_ms,
)
from controller.api.replicas import (
    MEMBERS_MAX,
    ROLE_MASTER,
    ROLE_NONE,
    ROLE_SLAVE,
    AlterSyncStateSetReply,
    AlterSyncStateSetRequest,
    BrokerMember,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    GetReplicaInfoRequest,
    HandoverRequest,
    ReplicaInfo,
    ReplicaInfoReply,
    RoleChange,
    role_of,
)
from controller.api.routes import (
    GetRoutesRequest,
    QueueRoute,
    ReplicaSetRoute,
    RoutesReply,
    TopicInfo,
)
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
from controller.errors import CodecError

__all__ = [
    "ACTIONS",
    "ADMIN_OPERATIONS",
    "MEMBERS_MAX",
    "NAME_BYTES_MAX",
    "OPERATIONS",
    "ROLE_MASTER",
    "ROLE_NONE",
    "ROLE_SLAVE",
    "STATUSES",
    "TOPICS_MAX",
    "AclDeleteRequest",
    "AclError",
    "AclListReply",
    "AclListRequest",
    "AclRequest",
    "AlterSyncStateSetReply",
    "AlterSyncStateSetRequest",
    "AuthChangeReply",
    "AuthData",
    "AuthDataReply",
    "BrokerHeartbeat",
    "BrokerMember",
    "CleanBrokerDataRequest",
    "ClusterListReply",
    "CodecError",
    "ControllerMember",
    "ControllerStatusReply",
    "ElectMasterRequest",
    "ElectionRecord",
    "GetReplicaInfoRequest",
    "GetRoutesRequest",
    "HandoverRequest",
    "HeartbeatReply",
    "JsonMessage",
    "Policy",
    "QueueRoute",
    "RegisterBrokerReply",
    "RegisterBrokerRequest",
    "ReplicaInfo",
    "ReplicaInfoReply",
    "ReplicaSetRoute",
    "ReplicaSetStatus",
    "RoleChange",
    "RoutesReply",
    "TopicInfo",
    "TransferLeaderReply",
    "TransferLeaderRequest",
    "User",
    "UserNameRequest",
    "UserRequest",
    "UsersReply",
    "authorize",
    "decide",
    "lease_max_ms",
    "requirement_of",
    "role_of",
]

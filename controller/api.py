"""What brokers and admin tools exchange with the controller (messages only; a leaf module).

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
    get_routes             GetRoutesRequest           RoutesReply
    cluster_list           {}                         ClusterListReply
    controller_status      {}                         ControllerStatusReply (any node answers)
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
change raced another one three times: retry).

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
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, ClassVar, Union

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
from controller.errors import CodecError

__all__ = [
    "ACTIONS",
    "ADMIN_OPERATIONS",
    "OPERATIONS",
    "ROLE_MASTER",
    "ROLE_NONE",
    "ROLE_SLAVE",
    "STATUSES",
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
    "ControllerMember",
    "ControllerStatusReply",
    "ElectMasterRequest",
    "ElectionRecord",
    "GetReplicaInfoRequest",
    "GetRoutesRequest",
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

STATUSES = (
    "OK", "NOT_LEADER", "MASTER_STILL_EXIST", "MASTER_NOT_AVAILABLE", "ELECT_MASTER_FAILED",
    "FENCED_MASTER_EPOCH", "FENCED_SYNC_STATE_SET_EPOCH", "INVALID_MASTER", "INVALID_REPLICAS",
    "BROKER_NOT_REGISTERED", "REPLICA_SET_NOT_FOUND", "BROKER_ALIVE", "TOPIC_NOT_FOUND", "BUSY",
    "INVALID_REQUEST", "INTERNAL_ERROR", "FENCED_AUTH_VERSION", "NO_PERMISSION",
    "UNAUTHENTICATED",
)
ROLE_MASTER = "master"
ROLE_SLAVE = "slave"
ROLE_NONE = "none"  # registered, but the set has no master (or the broker is not in it)
NAME_BYTES_MAX = 255
MEMBERS_MAX = 64  # brokers per replica set, members of a SyncStateSet
TOPICS_MAX = 100_000  # topics in one heartbeat



class JsonMessage:
    """Shared JSON codec of the messages (dataclass fields, checked against their types)."""

    __slots__ = ()
    KIND: ClassVar[str] = "message"

    def to_json(self) -> dict[str, Any]:
        return {field.name: _to_json(getattr(self, field.name))
                for field in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_json(cls, body: Any) -> typing.Self:
        if not isinstance(body, dict):
            raise CodecError(cls.KIND, "not a JSON object")
        hints = _type_hints(cls)
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if field.name in body:
                values[field.name] = _from_json(cls.KIND, field.name, hints[field.name],
                                                body[field.name])
            elif (field.default is dataclasses.MISSING
                  and field.default_factory is dataclasses.MISSING):
                raise CodecError(cls.KIND, f"missing field {field.name!r}")
        return cls(**values)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _to_json(value: Any) -> Any:
    if isinstance(value, JsonMessage):
        return value.to_json()
    if isinstance(value, tuple):
        return [_to_json(item) for item in value]
    return value


def _from_json(kind: str, name: str, hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [option for option in options if option is not type(None)]
        return _from_json(kind, name, inner, value)
    if origin is tuple:
        if not isinstance(value, list) or len(value) > TOPICS_MAX:
            raise CodecError(kind, f"{name} is not a list (of at most {TOPICS_MAX})")
        inner = typing.get_args(hint)[0]
        return tuple(_from_json(kind, name, inner, item) for item in value)
    if isinstance(hint, type) and issubclass(hint, JsonMessage):
        return hint.from_json(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise CodecError(kind, f"{name} is not a boolean: {value!r}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool) or abs(value) >= 2**63:
            raise CodecError(kind, f"{name} is not a 64-bit integer: {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str) or len(value) > NAME_BYTES_MAX:
            raise CodecError(kind, f"{name} is not a string of at most {NAME_BYTES_MAX}")
        return value
    raise AssertionError(f"unsupported field type {hint!r}")


# -- shared values -------------------------------------------------------------------------


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


def lease_max_ms(heartbeat_timeout_ms: int) -> int:
    """The longest master lease a controller reply can give (DESIGN §5.7, ha/replication/master_core.py):
    2/3 of controllerHeartbeatTimeoutMs past the heartbeat's send time, so it has lapsed
    before the controller could replace a master that went silent, with a third to spare for
    clock rates and a deposed Raft leader's last replies. The broker takes the smaller of
    this and its masterLeaseMs; a controller that replaces a master which still heartbeats
    (an operator's election) waits this long after its last reply naming it."""
    return heartbeat_timeout_ms * 2 // 3


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


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo(JsonMessage):
    """A topic as one replica set serves it (RocketMQ QueueData; perm bits R=4 W=2)."""

    KIND: ClassVar[str] = "topic info"
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6


# -- broker -> controller ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterBrokerRequest(JsonMessage):
    """Get (or get back) a broker id in a replica set; the address identifies the replica."""

    KIND: ClassVar[str] = "register_broker request"
    cluster_name: str
    broker_name: str
    broker_address: str


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterBrokerReply(JsonMessage):
    KIND: ClassVar[str] = "register_broker reply"
    status: str
    leader_address: str | None = None
    broker_id: int = -1
    replica: ReplicaInfo | None = None


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
class CleanBrokerDataRequest(JsonMessage):
    """Forget brokers of a set (all of them when `broker_ids` is empty); alive ones refuse."""

    KIND: ClassVar[str] = "clean_broker_data request"
    broker_name: str
    broker_ids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class GetRoutesRequest(JsonMessage):
    KIND: ClassVar[str] = "get_routes request"
    topic: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRoute(JsonMessage):
    KIND: ClassVar[str] = "queue route"
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaSetRoute(JsonMessage):
    """Where a replica set is reachable now (alive brokers only)."""

    KIND: ClassVar[str] = "replica set route"
    cluster_name: str
    broker_name: str
    master_address: str | None
    master_epoch: int
    slave_addresses: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RoutesReply(JsonMessage):
    KIND: ClassVar[str] = "get_routes reply"
    status: str
    leader_address: str | None = None
    topic: str = ""
    queues: tuple[QueueRoute, ...] = ()
    replica_sets: tuple[ReplicaSetRoute, ...] = ()


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


# -- users and ACLs (issue 16): admin -> controller, and brokers fetching the table ---------


@dataclasses.dataclass(frozen=True, slots=True)
class UserRequest(JsonMessage):
    """user_create (every field) / user_update (empty fields keep their value)."""

    KIND: ClassVar[str] = "user request"
    name: str
    access_key: str = ""
    secret_key: str = dataclasses.field(default="", repr=False)
    type: str = ""  # Super | Normal
    status: str = ""  # enabled | disabled


@dataclasses.dataclass(frozen=True, slots=True)
class UserNameRequest(JsonMessage):
    KIND: ClassVar[str] = "user_delete request"
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class AclRequest(JsonMessage):
    """acl_create / acl_update: one entry per resource (replacing the subject's entry for it)."""

    KIND: ClassVar[str] = "acl request"
    subject: str
    resources: tuple[str, ...]
    actions: tuple[str, ...]
    decision: str = "Allow"
    source_ips: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class AclDeleteRequest(JsonMessage):
    """acl_delete: the subject's entries for `resources` (all of them when empty)."""

    KIND: ClassVar[str] = "acl_delete request"
    subject: str
    resources: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class AclListRequest(JsonMessage):
    KIND: ClassVar[str] = "acl_list request"
    subject: str = ""  # "": every subject


@dataclasses.dataclass(frozen=True, slots=True)
class AuthChangeReply(JsonMessage):
    """A user/ACL change: committed through Raft (`version` is the table's new version), or
    refused (`status` INVALID_REQUEST with `message`)."""

    KIND: ClassVar[str] = "auth change reply"
    status: str
    leader_address: str | None = None
    version: int = 0
    message: str = ""


class _AuthJsonReply(JsonMessage):
    """Replies carrying users/policies: their codec is AuthData's (conf/acl.py)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "leader_address": self.leader_address,  # type: ignore
                **self._payload()}

    def _payload(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, slots=True)
class AuthDataReply(_AuthJsonReply):
    """get_auth_data: the whole table with secrets (members and Super users only)."""

    KIND: ClassVar[str] = "get_auth_data reply"
    status: str
    leader_address: str | None = None
    auth: AuthData | None = None

    def _payload(self) -> dict[str, Any]:
        return {"auth": self.auth.to_json() if self.auth is not None else None}

    @classmethod
    def from_json(cls, body: Any) -> AuthDataReply:
        if not isinstance(body, dict) or not isinstance(body.get("status"), str):
            raise CodecError(cls.KIND, "not a JSON object with a status")
        try:
            auth = AuthData.from_json(body["auth"]) if body.get("auth") is not None else None
        except AclError as err:
            raise CodecError(cls.KIND, str(err)) from None
        leader = body.get("leader_address")
        return cls(body["status"], leader if isinstance(leader, str) else None, auth)


@dataclasses.dataclass(frozen=True, slots=True)
class UsersReply(_AuthJsonReply):
    """user_list: users without their secrets."""

    KIND: ClassVar[str] = "user_list reply"
    status: str
    leader_address: str | None = None
    users: tuple[User, ...] = ()

    def _payload(self) -> dict[str, Any]:
        return {"users": [user.to_json(with_secret=False) for user in self.users]}


@dataclasses.dataclass(frozen=True, slots=True)
class AclListReply(_AuthJsonReply):
    KIND: ClassVar[str] = "acl_list reply"
    status: str
    leader_address: str | None = None
    policies: tuple[Policy, ...] = ()

    def _payload(self) -> dict[str, Any]:
        return {"policies": [policy.to_json() for policy in self.policies]}


ACTIONS: dict[str, tuple[type[JsonMessage] | None, type[JsonMessage]]] = {
    "register_broker": (RegisterBrokerRequest, RegisterBrokerReply),
    "broker_heartbeat": (BrokerHeartbeat, HeartbeatReply),
    "get_replica_info": (GetReplicaInfoRequest, ReplicaInfoReply),
    "alter_sync_state_set": (AlterSyncStateSetRequest, AlterSyncStateSetReply),
    "elect_master": (ElectMasterRequest, ReplicaInfoReply),
    "clean_broker_data": (CleanBrokerDataRequest, ReplicaInfoReply),
    "get_routes": (GetRoutesRequest, RoutesReply),
    "cluster_list": (None, ClusterListReply),
    "controller_status": (None, ControllerStatusReply),
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

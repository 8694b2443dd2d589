"""The controller's replicated state machine: replica sets, broker ids, masters, SyncStateSets.

Pure and deterministic: `apply(command)` changes the state and returns an `ApplyResult`; the
same log applied anywhere gives the same state. Everything that depends on time or heartbeats
(is a broker alive? who should be master?) is decided by the leader *before* it proposes, and
each command carries the epochs it was decided on, so applying a command that a newer event
overtook is refused (fenced) instead of acting on stale facts.

Per replica set (`broker_name`):

    brokers              broker_id -> address (ids from 1, never reused)
    master_broker_id     None while the set has no master
    master_epoch         +1 on every ElectMaster (a new master, or "no master")
    sync_state_set       the brokers that hold every acknowledged message (holds the master;
                         kept when the set loses its master, so a member can take over later)
    sync_state_set_epoch +1 on every change of the set

Commands (one JSON object per Raft entry, `{"command": <name>, ...fields}`):

    apply_broker_id      (cluster, set, address) -> the address's id, a new one if unknown;
                         creates the set on its first broker
    elect_master         (set, expected_master_epoch, new master | None): fenced by the epoch;
                         reason "handover" (a master that stopped taking puts hands its role
                         to a slave that holds its whole log: controller/handover.py) also
                         requires the new master in the SyncStateSet, checked here, so a
                         replay of the log decides the same
    alter_sync_state_set (set, master id, master_epoch, new set, sync_state_set_epoch):
                         checked in RocketMQ's order: set exists, set changes, requester is the
                         master, master epoch, SyncStateSet epoch, members registered, master in
                         the set (the leader checked that members are alive)
    clean_broker_data    (set, ids | all): forget brokers (the leader checked they are dead)
    set_auth             (expected version, the whole new users/ACL table): replaces
                         `auth` when its version is still `expected version` (else
                         FENCED_AUTH_VERSION): the leader computes a change from the applied
                         table, so two concurrent admin changes cannot lose one another

Snapshots are the JSON of every replica set and of the users/ACL table (`snapshot()` /
`ControllerState.restore`; a snapshot without "auth" restores an empty table).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, ClassVar

from conf.acl import AclError, AuthData
from controller.api import MEMBERS_MAX, BrokerMember, JsonMessage, ReplicaInfo
from controller.errors import CodecError

__all__ = [
    "HANDOVER",
    "AlterSyncStateSet",
    "ApplyBrokerId",
    "ApplyResult",
    "CleanBrokerData",
    "Command",
    "ControllerState",
    "ElectMaster",
    "SetAuth",
    "decode_command",
    "encode_command",
]

HANDOVER = "handover"  # ElectMaster.reason of a master's handover (controller/handover.py)


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyBrokerId(JsonMessage):
    KIND: ClassVar[str] = "apply_broker_id"
    cluster_name: str
    broker_name: str
    broker_address: str


@dataclasses.dataclass(frozen=True, slots=True)
class ElectMaster(JsonMessage):
    """Raise the master epoch with a new master (or none). `expected_sync_state_set_epoch` is
    the SyncStateSet version the choice was made on: a change of the set committed between the
    decision and this entry (a master shrinking it to itself, which may then ack alone) fences
    the election, else it could pick a broker that left the set and lacks acknowledged puts
    (sim seed 17012). None: entries written before the field existed, applied as they were."""

    KIND: ClassVar[str] = "elect_master"
    broker_name: str
    expected_master_epoch: int
    new_master_broker_id: int | None
    expected_sync_state_set_epoch: int | None = None
    reason: str | None = None  # HANDOVER, or None (a failover or an operator's election)

    @classmethod
    def decided_on(cls, replica: ReplicaInfo, new_master_broker_id: int | None, *,
                   reason: str | None = None) -> ElectMaster:
        """The election of `new_master_broker_id` chosen from `replica` as applied: fenced by
        both its master epoch and its SyncStateSet epoch (every proposer builds it so)."""
        return cls(replica.broker_name, replica.master_epoch, new_master_broker_id,
                   replica.sync_state_set_epoch, reason)

    def to_json(self) -> dict[str, Any]:
        body = JsonMessage.to_json(self)
        if self.reason is None:  # entries without a reason encode as they did before it
            del body["reason"]
        return body


@dataclasses.dataclass(frozen=True, slots=True)
class AlterSyncStateSet(JsonMessage):
    KIND: ClassVar[str] = "alter_sync_state_set"
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class CleanBrokerData(JsonMessage):
    KIND: ClassVar[str] = "clean_broker_data"
    broker_name: str
    broker_ids: tuple[int, ...]  # empty: the whole set


@dataclasses.dataclass(frozen=True, slots=True)
class SetAuth(JsonMessage):
    """Replace the users/ACL table if it is still at `expected_version` (a compare-and-set)."""

    KIND: ClassVar[str] = "set_auth"
    expected_version: int
    auth: AuthData

    def to_json(self) -> dict[str, Any]:
        return {"expected_version": self.expected_version, "auth": self.auth.to_json()}

    @classmethod
    def from_json(cls, body: Any) -> SetAuth:
        if not isinstance(body, dict) or not isinstance(body.get("expected_version"), int):
            raise CodecError(cls.KIND, "expected_version missing")
        try:
            return cls(body["expected_version"], AuthData.from_json(body.get("auth")))
        except AclError as err:
            raise CodecError(cls.KIND, str(err)) from None


Command = ApplyBrokerId | ElectMaster | AlterSyncStateSet | CleanBrokerData | SetAuth
_COMMANDS: dict[str, type[Any]] = {
    cls.KIND: cls for cls in (ApplyBrokerId, ElectMaster, AlterSyncStateSet, CleanBrokerData,
                              SetAuth)
}


def encode_command(command: Command) -> bytes:
    return json.dumps({"command": command.KIND, **command.to_json()},
                      separators=(",", ":")).encode()


def decode_command(data: bytes) -> Command:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError
        raise CodecError("controller command", f"not JSON ({str(err)[:200]})") from err
    if not isinstance(body, dict) or not isinstance(body.get("command"), str) or (
            body["command"] not in _COMMANDS):
        raise CodecError("controller command", f"unknown command in {data[:80]!r}")
    kind = _COMMANDS[body.pop("command")]
    return kind.from_json(body)  # type: ignore[no-any-return]


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyResult:
    status: str
    replica: ReplicaInfo | None = None
    broker_id: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class _ReplicaSet:
    cluster_name: str
    broker_name: str
    brokers: tuple[BrokerMember, ...]  # sorted by id
    next_broker_id: int
    master_broker_id: int | None
    master_epoch: int
    sync_state_set: tuple[int, ...]  # sorted
    sync_state_set_epoch: int

    def info(self) -> ReplicaInfo:
        address = self.address_of(self.master_broker_id)
        return ReplicaInfo(self.cluster_name, self.broker_name, self.master_broker_id, address,
                           self.master_epoch, self.sync_state_set, self.sync_state_set_epoch,
                           self.brokers)

    def address_of(self, broker_id: int | None) -> str | None:
        for member in self.brokers:
            if member.broker_id == broker_id:
                return member.broker_address
        return None

    def ids(self) -> set[int]:
        return {member.broker_id for member in self.brokers}


class ControllerState:
    """All replica sets. Mutated only by `apply` (and `restore`)."""

    def __init__(self) -> None:
        self._sets: dict[str, _ReplicaSet] = {}
        # users and ACLs: replaced whole (never mutated), so handler threads may read it
        self.auth = AuthData()

    # -- queries ---------------------------------------------------------------------------

    def replica_info(self, broker_name: str) -> ReplicaInfo | None:
        replica = self._sets.get(broker_name)
        return replica.info() if replica else None

    def replica_infos(self) -> list[ReplicaInfo]:
        return [self._sets[name].info() for name in sorted(self._sets)]

    # -- apply -----------------------------------------------------------------------------

    def apply(self, command: Command) -> ApplyResult:
        if isinstance(command, ApplyBrokerId):
            return self._apply_broker_id(command)
        if isinstance(command, ElectMaster):
            return self._elect_master(command)
        if isinstance(command, AlterSyncStateSet):
            return self._alter_sync_state_set(command)
        if isinstance(command, SetAuth):
            return self._set_auth(command)
        return self._clean_broker_data(command)

    def _set_auth(self, command: SetAuth) -> ApplyResult:
        if command.expected_version != self.auth.version or (
                command.auth.version <= self.auth.version):
            return ApplyResult("FENCED_AUTH_VERSION")
        self.auth = command.auth
        return ApplyResult("OK")

    def _apply_broker_id(self, command: ApplyBrokerId) -> ApplyResult:
        replica = self._sets.get(command.broker_name)
        if replica is None:
            replica = _ReplicaSet(command.cluster_name, command.broker_name, (), 1, None, 0, (),
                                  0)
        if replica.cluster_name != command.cluster_name:
            return ApplyResult("INVALID_REQUEST", replica.info())
        for member in replica.brokers:
            if member.broker_address == command.broker_address:
                return ApplyResult("OK", replica.info(), member.broker_id)
        if len(replica.brokers) >= MEMBERS_MAX:
            return ApplyResult("INVALID_REQUEST", replica.info())
        broker_id = replica.next_broker_id
        brokers = (*replica.brokers, BrokerMember(broker_id, command.broker_address))
        replica = dataclasses.replace(replica, brokers=brokers, next_broker_id=broker_id + 1)
        self._sets[command.broker_name] = replica
        return ApplyResult("OK", replica.info(), broker_id)

    def _elect_master(self, command: ElectMaster) -> ApplyResult:
        replica = self._sets.get(command.broker_name)
        if replica is None:
            return ApplyResult("REPLICA_SET_NOT_FOUND")
        if command.expected_master_epoch != replica.master_epoch:
            return ApplyResult("FENCED_MASTER_EPOCH", replica.info())
        if command.expected_sync_state_set_epoch not in (None, replica.sync_state_set_epoch):
            return ApplyResult("FENCED_SYNC_STATE_SET_EPOCH", replica.info())
        new_master = command.new_master_broker_id
        if new_master is not None and new_master not in replica.ids():
            return ApplyResult("BROKER_NOT_REGISTERED", replica.info())
        if command.reason == HANDOVER and (
                new_master is None or new_master == replica.master_broker_id
                or new_master not in replica.sync_state_set):
            # a handover names a member holding every acknowledged put, other than the master
            return ApplyResult("ELECT_MASTER_FAILED", replica.info())
        if new_master is None:
            # "No master": fence the old one, but keep the set, so a member of it can be
            # elected once it is back (RocketMQ keeps the SyncStateSet here too).
            replica = dataclasses.replace(replica, master_broker_id=None,
                                          master_epoch=replica.master_epoch + 1)
        else:
            replica = dataclasses.replace(
                replica, master_broker_id=new_master, master_epoch=replica.master_epoch + 1,
                sync_state_set=(new_master,),
                sync_state_set_epoch=replica.sync_state_set_epoch + 1,
            )
        self._sets[command.broker_name] = replica
        return ApplyResult("OK" if new_master is not None else "MASTER_NOT_AVAILABLE",
                           replica.info())

    def _alter_sync_state_set(self, command: AlterSyncStateSet) -> ApplyResult:
        replica = self._sets.get(command.broker_name)
        if replica is None:
            return ApplyResult("REPLICA_SET_NOT_FOUND")
        new_set = tuple(sorted(set(command.sync_state_set)))
        # The set already held is accepted too (a new epoch, same members): a master uses it
        # to fence a proposal of its that may still be in flight (ha/replication/master_core.py).
        checks = (
            (command.master_broker_id != replica.master_broker_id, "INVALID_MASTER"),
            (command.master_epoch != replica.master_epoch, "FENCED_MASTER_EPOCH"),
            (command.sync_state_set_epoch != replica.sync_state_set_epoch,
             "FENCED_SYNC_STATE_SET_EPOCH"),
            (not set(new_set) <= replica.ids(), "INVALID_REPLICAS"),
            (command.master_broker_id not in new_set, "INVALID_REPLICAS"),
        )
        for failed, status in checks:
            if failed:
                return ApplyResult(status, replica.info())
        replica = dataclasses.replace(replica, sync_state_set=new_set,
                                      sync_state_set_epoch=replica.sync_state_set_epoch + 1)
        self._sets[command.broker_name] = replica
        return ApplyResult("OK", replica.info())

    def _clean_broker_data(self, command: CleanBrokerData) -> ApplyResult:
        replica = self._sets.get(command.broker_name)
        if replica is None:
            return ApplyResult("REPLICA_SET_NOT_FOUND")
        if not command.broker_ids:
            del self._sets[command.broker_name]
            return ApplyResult("OK")
        gone = set(command.broker_ids)
        if not gone <= replica.ids():
            return ApplyResult("BROKER_NOT_REGISTERED", replica.info())
        brokers = tuple(m for m in replica.brokers if m.broker_id not in gone)
        new_set = tuple(b for b in replica.sync_state_set if b not in gone)
        changes: dict[str, Any] = {"brokers": brokers}
        if new_set != replica.sync_state_set:
            changes["sync_state_set"] = new_set
            changes["sync_state_set_epoch"] = replica.sync_state_set_epoch + 1
        if replica.master_broker_id in gone:
            changes["master_broker_id"] = None
            changes["master_epoch"] = replica.master_epoch + 1
        replica = dataclasses.replace(replica, **changes)
        self._sets[command.broker_name] = replica
        return ApplyResult("OK", replica.info())

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        sets = []
        for name in sorted(self._sets):
            replica = self._sets[name]
            sets.append({"info": replica.info().to_json(),
                         "next_broker_id": replica.next_broker_id})
        body: dict[str, Any] = {"version": 1, "replica_sets": sets}
        if self.auth.version:  # an unchanged table keeps the snapshot (and digest) as before
            body["auth"] = self.auth.to_json()
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def restore(cls, data: bytes) -> ControllerState:
        state = cls()
        if not data:
            return state
        try:
            body = json.loads(data)
            sets = body["replica_sets"]
            for item in sets:
                info = ReplicaInfo.from_json(item["info"])
                state._sets[info.broker_name] = _ReplicaSet(
                    info.cluster_name, info.broker_name, info.brokers,
                    int(item["next_broker_id"]), info.master_broker_id, info.master_epoch,
                    info.sync_state_set, info.sync_state_set_epoch,
                )
            if not isinstance(sets, list):
                raise TypeError("replica_sets is not a list")
            if body.get("auth") is not None:
                state.auth = AuthData.from_json(body["auth"])
        except (ValueError, KeyError, TypeError, RecursionError) as err:  # AclError: ValueError
            raise CodecError("controller snapshot", str(err)[:200]) from err
        return state

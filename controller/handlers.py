"""RequestHandlers: what the controller leader does with each broker and admin request.

Requests (`handle(action, body)`, already decoded by controller/service.py; the actions are
listed in `controller.api`) are answered by the leader only; other nodes reply `NOT_LEADER`
with the leader's client address. Heartbeats are recorded by every node (the liveness table
of a new leader is then current), credited as liveness.heartbeat_credit_ms says; the
leader's answer is leader_core.answer_heartbeat, and it may wake the watchdog
(controller/watchdog.py) to scan or probe now. `controller_status` is answered by any node.

Reads of the replicated state wait behind a ReadIndex barrier (`RaftShell.read_barrier`);
changes are proposals (`RaftShell.propose`) that the state machine fences by epochs or
versions. An operator's election that replaces a master which still heartbeats first lets its
lease lapse (`_replace_live_master`). Users and ACLs change through controller/auth_changes.py.

Outcomes are statuses in the reply: BUSY when the Raft log is full or slow, INTERNAL_ERROR
for a request this code did not foresee (logged; it fails alone). A broken invariant or a
storage failure stops the node (`RaftShell.die`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from typing import Any

from conf.acl import User
from conf.protocol import LOCAL, refusal
from conf.version import VERSION
from controller.api import (
    ACTIONS,
    AclDeleteRequest,
    AclListReply,
    AclListRequest,
    AclRequest,
    AlterSyncStateSetReply,
    AlterSyncStateSetRequest,
    AuthChangeReply,
    AuthDataReply,
    BrokerHeartbeat,
    CleanBrokerDataRequest,
    ClusterListReply,
    ControllerMember,
    ControllerStatusReply,
    ElectMasterRequest,
    GetReplicaInfoRequest,
    GetRoutesRequest,
    HandoverRequest,
    HeartbeatReply,
    JsonMessage,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    ReplicaInfo,
    ReplicaInfoReply,
    ReplicaSetStatus,
    TransferLeaderReply,
    TransferLeaderRequest,
    UserNameRequest,
    UserRequest,
    UsersReply,
    lease_max_ms,
)
from controller.auth_changes import (
    change_auth,
    with_acl,
    with_user_created,
    with_user_updated,
    without_acl,
    without_user,
)
from controller.election import choose_master
from controller.errors import BusyError, ControllerError, NotLeaderError
from controller.handover import decide_handover
from controller.leader_core import (
    answer_heartbeat,
    lease_held,
    refuse_sync_state_set,
    state_current,
)
from controller.liveness import LiveTable, heartbeat_credit_ms
from controller.raft import Role
from controller.raft_shell import RaftShell, monotonic_ms
from controller.state import AlterSyncStateSet, ApplyBrokerId, CleanBrokerData, ElectMaster
from controller.watchdog import LivenessWatchdog

__all__ = ["HEARD_POLL_MS", "RequestHandlers"]

logger = logging.getLogger(__name__)
REFUSED_VERSIONS_MAX = 1024  # (broker, version) pairs whose refusal was logged, remembered

HEARD_POLL_MS = 20  # how often an operator's election looks for the heartbeats it waits for


class RequestHandlers:
    def __init__(self, shell: RaftShell, live: LiveTable, watchdog: LivenessWatchdog, *,
                 init_user: User | None) -> None:
        self._shell = shell
        self.config = shell.config
        self.live = live
        self._watchdog = watchdog
        self.init_user = init_user  # initAuthenticationUser: not to be deleted
        self.prefix = shell.prefix
        # This process's clock, named in heartbeat replies: an echo of another process's
        # (a controller restarted at this address) is not taken for one of ours
        self.clock_id = random.SystemRandom().getrandbits(62) + 1
        # replica set -> (master epoch, master id) whose lease an operator's election lets
        # lapse (the watchdog holds the same for a scan's elections)
        self._lease_holds: dict[str, tuple[int, int | None]] = {}
        # (broker address, protocol text) -> the line that refused it (logged once)
        self._refused_versions: dict[tuple[str, str], str] = {}

    async def handle(self, action: str, request: JsonMessage | None) -> JsonMessage:
        """Answer one client request (already decoded); runs on the node's event loop."""
        if action == "controller_status":
            return self._status()
        if isinstance(request, (RegisterBrokerRequest, BrokerHeartbeat)):
            refused = self._version_refusal(request)
            if refused is not None:
                return refused
        if action == "broker_heartbeat":
            assert isinstance(request, BrokerHeartbeat)
            now_ms = monotonic_ms()
            credited_ms = self.live.heard(request, now_ms, clock=self.clock_id,
                                          transit_max_ms=self.config.transit_max_ms)
            if credited_ms < now_ms:
                logger.info("%s: a late heartbeat of %s broker %d counts %d ms before its "
                            "arrival (heartbeatTransitMaxMs)", self.prefix,
                            request.broker_name, request.broker_id, now_ms - credited_ms)
        try:
            self._shell.require_leader()
            return await getattr(self, f"_{action}")(request)
        except NotLeaderError as err:
            if action == "broker_heartbeat":  # recorded here too: the echo makes it count
                return HeartbeatReply("NOT_LEADER", err.leader_address,
                                      controller_ms=monotonic_ms(),
                                      controller_clock=self.clock_id)
            return _not_leader(action, err.leader_address)
        except BusyError:
            return _reply_type(action)(status="BUSY", leader_address=self._shell.leader_address())
        except (AssertionError, ControllerError, OSError) as err:
            # a broken invariant or a storage failure: stop rather than limp on
            self._shell.die(err)
            raise
        except Exception:  # a request this handler did not foresee fails alone
            logger.exception("%s: %s failed", self.prefix, action)
            return _reply_type(action)(status="INTERNAL_ERROR",
                                       leader_address=self._shell.leader_address())

    def _version_refusal(self, request: RegisterBrokerRequest | BrokerHeartbeat
                         ) -> JsonMessage | None:
        """VERSION_REFUSED for a broker whose protocol version the rule refuses (logged once
        per broker and version), before it counts as heard."""
        line = refusal(LOCAL, request.protocol,
                       f"broker {request.broker_name} at {request.broker_address}")
        if line is None:
            return None
        if len(self._refused_versions) >= REFUSED_VERSIONS_MAX:
            self._refused_versions.clear()  # a line may then be logged again: harmless
        if self._refused_versions.setdefault((request.broker_address, request.protocol), line
                                             ) is line:
            logger.warning("%s: %s", self.prefix, line)
        reply = (RegisterBrokerReply if isinstance(request, RegisterBrokerRequest)
                 else HeartbeatReply)
        return reply("VERSION_REFUSED", protocol=LOCAL.text())

    def _status(self) -> ControllerStatusReply:
        shell = self._shell
        raft, transport = shell.raft, shell.transport
        digest = hashlib.blake2b(shell.state.snapshot(), digest_size=8).hexdigest()
        return ControllerStatusReply(
            "OK", raft.node_id, raft.role.value, raft.term, raft.leader_id,
            shell.leader_address(), raft.log.committed_index, raft.log.applied_index,
            raft.log.snapshot.entry_index, digest, raft.rejected_messages,
            transport.bad_frames if transport else 0,
            transport.refused_connections + transport.idle_closed if transport else 0,
            tuple(shell.telemetry.recent_elections), shell.telemetry.leader_changes,
            VERSION,
        )

    async def _transfer_leader(self, request: TransferLeaderRequest) -> TransferLeaderReply:
        """An operator's `transfer-leader` (the controller's SIGTERM does the same: main.py)."""
        shell = self._shell
        try:
            new_leader = await shell.transfer_leadership(request.to_node_id)
        except ValueError as err:
            logger.info("%s: transfer_leader refused: %s", self.prefix, err)
            return TransferLeaderReply("INVALID_REQUEST", shell.leader_address(),
                                       self.config.node_id)
        raft = shell.raft
        status = "OK" if new_leader is not None else "LEADER_TRANSFER_FAILED"
        return TransferLeaderReply(status, shell.leader_address(), self.config.node_id,
                                   raft.leader_id, raft.term)

    async def _register_broker(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        result = await self._shell.propose(ApplyBrokerId(
            request.cluster_name, request.broker_name, request.broker_address))
        return RegisterBrokerReply(result.status, None, result.broker_id, result.replica,
                                   protocol=LOCAL.text())

    async def _broker_heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        replica = self._shell.state.replica_info(request.broker_name)
        now_ms = monotonic_ms()
        heard = answer_heartbeat(
            replica, request,
            lease_held=(not state_current(self._shell.raft.log, self._shell.raft.term)
                        or (replica is not None
                            and self._lease_held(replica, request.broker_id))),
            master_silent_ms=(None if replica is None
                              else self.live.silent_ms(replica, replica.master_broker_id, now_ms)),
            heartbeat_timeout_ms=self.config.heartbeat_timeout_ms)
        if heard.status != "OK":
            return HeartbeatReply(heard.status)
        assert replica is not None
        self._watchdog.wake(heard.wake, replica)
        return HeartbeatReply("OK", None, heard.role,
                              heartbeat_timeout_ms=self.config.heartbeat_timeout_ms,
                              master_silent=heard.master_silent,
                              auth_version=self._shell.state.auth.version,
                              controller_ms=now_ms, controller_clock=self.clock_id,
                              # now_ms is not before handle's: this is not less than the
                              # credit recorded there was behind (a shorter lease: safe)
                              credit_behind_ms=now_ms - self._credit_ms(request, now_ms),
                              protocol=LOCAL.text())

    def _credit_ms(self, request: BrokerHeartbeat, arrived_ms: int) -> int:
        return heartbeat_credit_ms(request, arrived_ms, clock=self.clock_id,
                                   transit_max_ms=self.config.transit_max_ms)

    async def _get_replica_info(self, request: GetReplicaInfoRequest) -> ReplicaInfoReply:
        await self._shell.read_barrier()
        return self._replica_reply("OK", request.broker_name)

    def _replica_reply(self, status: str, broker_name: str) -> ReplicaInfoReply:
        replica = self._shell.state.replica_info(broker_name)
        if replica is None:
            return ReplicaInfoReply("REPLICA_SET_NOT_FOUND" if status == "OK" else status)
        alive = tuple(sorted(self.live.alive(replica, monotonic_ms())))
        return ReplicaInfoReply(status, None, replica, alive)

    async def _alter_sync_state_set(
        self, request: AlterSyncStateSetRequest
    ) -> AlterSyncStateSetReply:
        replica = self._shell.state.replica_info(request.broker_name)
        alive = {} if replica is None else self.live.alive(replica, monotonic_ms())
        refusal = refuse_sync_state_set(replica, request.sync_state_set, alive)
        if refusal is not None:
            if replica is None:
                return AlterSyncStateSetReply(refusal)
            return AlterSyncStateSetReply(refusal, None, replica.sync_state_set,
                                          replica.sync_state_set_epoch)
        result = await self._shell.propose(AlterSyncStateSet(
            request.broker_name, request.master_broker_id, request.master_epoch,
            request.sync_state_set, request.sync_state_set_epoch,
        ))
        info = result.replica
        return AlterSyncStateSetReply(result.status, None, info.sync_state_set if info else (),
                                      info.sync_state_set_epoch if info else 0)

    async def _elect_master(self, request: ElectMasterRequest) -> ReplicaInfoReply:
        await self._shell.read_barrier()
        replica = self._shell.state.replica_info(request.broker_name)
        if replica is None:
            return ReplicaInfoReply("REPLICA_SET_NOT_FOUND")
        if request.broker_name in self._lease_holds:  # one operator election per set at once
            return self._replica_reply("BUSY", request.broker_name)
        election = choose_master(
            replica, self.live.alive(replica, monotonic_ms()),
            designated_broker_id=request.designated_broker_id,
            unclean_enabled=self.config.unclean_election_enabled,
        )
        if (election.status == "OK" and election.broker_id != replica.master_broker_id
                and self.live.is_alive(replica, replica.master_broker_id, monotonic_ms())):
            return await self._replace_live_master(replica, request)
        if election.status == "OK" or (
            election.status == "MASTER_NOT_AVAILABLE" and replica.master_broker_id is not None
        ):
            result = await self._shell.propose(ElectMaster.decided_on(replica, election.broker_id))
            return self._replica_reply(result.status, request.broker_name)
        return self._replica_reply(election.status, request.broker_name)

    async def _replace_live_master(self, replica: ReplicaInfo, request: ElectMasterRequest
                                   ) -> ReplicaInfoReply:
        """An operator's election that replaces a master which still heartbeats.

        Why (docs/design.md §5.7): while its lease holds, a master acks by its quorum rule, with the
        acks of slaves that have not heard of the election yet; a new master elected meanwhile
        may lack those puts, and the slaves that hold them truncate them when they follow it.
        So: stop renewing its lease (its heartbeats get no role while the hold lasts, until
        the election is committed), wait for a heartbeat in which the master itself says its
        lease has lapsed (by its own clock; the position in it was read after the lapse, so
        it covers every put the master acked under the lease), and elect the chosen slave
        only once it reports that position. From the lapse on the old master acks only what
        every slave holds, so it stays safe until it learns it was replaced. The election
        is refused (BUSY) while this node has led for less than controllerHeartbeatTimeoutMs
        (a deposed leader may still be renewing leases), and fails if leadership changes
        meanwhile. Costs up to lease_max_ms (2 s by default); a crashed master is replaced
        without it (it was silent for longer than any lease)."""
        name = replica.broker_name
        since = self._shell.leader_since_ms
        if since is None or monotonic_ms() - since < self.config.heartbeat_timeout_ms:
            return self._replica_reply("BUSY", name)
        term = self._shell.raft.term
        self._lease_holds[name] = (replica.master_epoch, replica.master_broker_id)
        logger.info("%s: %s: electing broker %s in place of master %s once its lease has "
                    "lapsed", self.prefix, name, request.designated_broker_id,
                    replica.master_broker_id)
        try:
            held_at_ms = monotonic_ms()
            master_heard = await self._heard_since(
                replica, replica.master_broker_id, held_at_ms, 0, lease_lapsed=True,
                wait_max_ms=lease_max_ms(self.config.heartbeat_timeout_ms)
                + self.config.heartbeat_timeout_ms)
            if master_heard is None:  # silent, or its lease never lapsed
                return self._replica_reply("ELECT_MASTER_FAILED", name)
            await self._shell.read_barrier()
            current = self._shell.state.replica_info(name)
            if (self._shell.raft.term != term or current is None
                    or current.master_epoch != replica.master_epoch):
                return self._replica_reply("ELECT_MASTER_FAILED", name)  # changed meanwhile
            election = choose_master(
                current, self.live.alive(current, monotonic_ms()),
                designated_broker_id=request.designated_broker_id,
                unclean_enabled=self.config.unclean_election_enabled)
            if election.status != "OK" or election.broker_id == current.master_broker_id:
                return self._replica_reply(election.status, name)
            # Puts acked before the lapse were on a quorum, not necessarily on the chosen one.
            chosen_heard = await self._heard_since(
                current, election.broker_id, master_heard[1], master_heard[0],
                wait_max_ms=self.config.heartbeat_timeout_ms)
            if chosen_heard is None or self._shell.raft.term != term:
                return self._replica_reply("ELECT_MASTER_FAILED", name)
            result = await self._shell.propose(ElectMaster.decided_on(current, election.broker_id))
            return self._replica_reply(result.status, name)
        finally:
            self._lease_holds.pop(name, None)  # after the commit: the old master is a slave

    def _lease_held(self, replica: ReplicaInfo, broker_id: int) -> bool:
        """Is `broker_id` the master whose lease an election (decided by a scan, or an
        operator's) is letting lapse? (leader_core.lease_held)"""
        return (lease_held(self._lease_holds, replica, broker_id)
                or self._watchdog.election_held(replica, broker_id))

    async def _heard_since(self, replica: ReplicaInfo, broker_id: int | None, since_ms: int,
                           position_min: int, *, wait_max_ms: int, lease_lapsed: bool = False
                           ) -> tuple[int, int] | None:
        """Wait (at most `wait_max_ms`) for a heartbeat of `broker_id` received at `since_ms`
        or later that reports a log position >= `position_min` (and, with `lease_lapsed`,
        that its master lease had lapsed); its (position, received_ms)."""
        deadline_ms = monotonic_ms() + wait_max_ms
        while monotonic_ms() < deadline_ms:
            heard = self.live.position_heard_since(replica, broker_id, since_ms,
                                                   lease_lapsed=lease_lapsed)
            if heard is not None and heard[0] >= position_min:
                return heard
            await asyncio.sleep(HEARD_POLL_MS / 1000)
        return None

    async def _handover_master(self, request: HandoverRequest) -> ReplicaInfoReply:
        """A sealed master hands its role to a slave that holds its whole log (the checks and
        why no lease wait is needed: controller/handover.py)."""
        await self._shell.read_barrier()
        replica = self._shell.state.replica_info(request.broker_name)
        if request.broker_name in self._lease_holds:  # an operator's election is under way
            return self._replica_reply("BUSY", request.broker_name)
        alive = {} if replica is None else self.live.alive(replica, monotonic_ms())
        status, command = decide_handover(replica, request, alive)
        if command is None:
            return self._replica_reply(status, request.broker_name)
        logger.info("%s: %s: master %d hands over to broker %s at log position %d",
                    self.prefix, request.broker_name, request.broker_id,
                    command.new_master_broker_id, request.sealed_log_position)
        result = await self._shell.propose(command)
        return self._replica_reply(result.status, request.broker_name)

    async def _clean_broker_data(self, request: CleanBrokerDataRequest) -> ReplicaInfoReply:
        await self._shell.read_barrier()
        replica = self._shell.state.replica_info(request.broker_name)
        if replica is None:
            return ReplicaInfoReply("REPLICA_SET_NOT_FOUND")
        alive = self.live.alive(replica, monotonic_ms())
        targets = set(request.broker_ids) or {m.broker_id for m in replica.brokers}
        if targets & set(alive):
            return ReplicaInfoReply("BROKER_ALIVE", None, replica, tuple(sorted(alive)))
        result = await self._shell.propose(CleanBrokerData(request.broker_name, request.broker_ids))
        if result.status == "OK":
            self.live.forget(request.broker_name, request.broker_ids)
        return self._replica_reply(result.status, request.broker_name) if result.replica else (
            ReplicaInfoReply(result.status))

    # -- users and ACLs (replicated: every change is a SetAuth entry) ------------------------

    async def _get_auth_data(self, request: None) -> AuthDataReply:
        await self._shell.read_barrier()
        return AuthDataReply("OK", None, self._shell.state.auth)

    async def _user_list(self, request: None) -> UsersReply:
        await self._shell.read_barrier()
        return UsersReply("OK", None, self._shell.state.auth.users)

    async def _acl_list(self, request: AclListRequest) -> AclListReply:
        await self._shell.read_barrier()
        return AclListReply("OK", None, tuple(
            policy for policy in self._shell.state.auth.policies
            if not request.subject or policy.subject == request.subject))

    async def _user_create(self, request: UserRequest) -> AuthChangeReply:
        return await change_auth(self._shell, lambda auth: with_user_created(auth, request))

    async def _user_update(self, request: UserRequest) -> AuthChangeReply:
        return await change_auth(self._shell, lambda auth: with_user_updated(auth, request))

    async def _user_delete(self, request: UserNameRequest) -> AuthChangeReply:
        return await change_auth(self._shell, lambda auth: without_user(
            auth, request, init_user=self.init_user))

    async def _acl_create(self, request: AclRequest) -> AuthChangeReply:
        return await change_auth(self._shell, lambda auth: with_acl(auth, request, create=True))

    async def _acl_update(self, request: AclRequest) -> AuthChangeReply:
        return await change_auth(self._shell,
                                 lambda auth: with_acl(auth, request, create=False))

    async def _acl_delete(self, request: AclDeleteRequest) -> AuthChangeReply:
        return await change_auth(self._shell, lambda auth: without_acl(auth, request))

    async def _get_routes(self, request: GetRoutesRequest) -> JsonMessage:
        return self.live.routes(request.topic, self._shell.state.replica_infos(), monotonic_ms())

    async def _cluster_list(self, request: None) -> ClusterListReply:
        await self._shell.read_barrier()
        now_ms = monotonic_ms()
        controllers = []
        for peer in self.config.voter_ids:
            if peer == self._shell.raft.node_id:
                role = Role.LEADER.value
            else:
                progress = self._shell.raft.progress.get(peer)
                role = "follower" if progress and progress.match_index > 0 else "unknown"
            controllers.append(ControllerMember(peer, self.config.client_address(peer), role))
        sets = tuple(
            ReplicaSetStatus(replica, tuple(sorted(self.live.alive(replica, now_ms))))
            for replica in self._shell.state.replica_infos()
        )
        return ClusterListReply("OK", None, tuple(controllers), sets)


def _reply_type(action: str) -> type[Any]:
    return ACTIONS[action][1]


def _not_leader(action: str, leader_address: str | None) -> JsonMessage:
    reply: JsonMessage = _reply_type(action)(status="NOT_LEADER", leader_address=leader_address)
    return reply

"""ControllerNode: the asyncio shell around the Raft core, the state machine and the live table.

Everything runs on one event loop (the core is not thread-safe; the Flight server hands
requests over with `run_coroutine_threadsafe`). The Ready loop, after every tick, message and
proposal (`_drain`), in this order, for the reason given in `controller.raft.core`:

    1. persist the Ready's snapshot, entries and hard state with fsync (FileRaftStorage);
    2. queue its messages to the peers;
    3. apply its snapshot / committed entries to `ControllerState`, answer the proposals
       waiting on those entries (only if the entry's term is the one proposed), and release
       ReadIndex reads whose index is applied;
    4. advance.

Leader duties (`_scan`, every scanNotActiveBrokerIntervalMs, and at once when a heartbeat
comes from a set without a master): a replica set whose master has been silent for
controllerHeartbeatTimeoutMs gets a new master by `choose_master`; so does a set without a
master once an eligible broker is alive. A new leader first waits one heartbeat timeout before
it declares any master dead (its live table starts empty or stale).

Faster than the timeout, for a master that crashed: a slave whose HA link to the master broke
says so in its next heartbeat (`master_unreachable_epoch`, sent at once). The leader then probes
the master's client address with a TCP connect (masterProbeTimeoutMs): refused means no process
listens there any more, so the master is forgotten from the live table and the scan elects
now. A probe that connects or times out proves nothing (a stopped or busy process still
accepts connections in the kernel), and the heartbeat timeout decides as before.

Requests (`handle(action, body)`) are answered by the leader only; other nodes reply
`NOT_LEADER` with the leader's client address. Heartbeats are recorded by every node.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

from conf.acl import AclError, AuthData, Policy, User
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
    HeartbeatReply,
    JsonMessage,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    ReplicaInfo,
    ReplicaInfoReply,
    ReplicaSetStatus,
    UserNameRequest,
    UserRequest,
    UsersReply,
    lease_max_ms,
)
from controller.config import ControllerConfig
from controller.election import choose_master
from controller.errors import (
    BusyError,
    CodecError,
    ControllerError,
    NotLeaderError,
    StoreLockedError,
)
from controller.leader_core import (
    Wake,
    answer_heartbeat,
    lease_held,
    refuse_sync_state_set,
    scan_decision,
    state_current,
)
from controller.liveness import LiveTable, heartbeat_credit_ms
from controller.raft import (
    Entry,
    EntryKind,
    FileRaftStorage,
    Message,
    ProposeStatus,
    RaftConfig,
    RaftNode,
    ReadState,
    Role,
    SnapshotRequest,
    save_ready,
)
from controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    ApplyResult,
    CleanBrokerData,
    Command,
    ControllerState,
    ElectMaster,
    SetAuth,
    decode_command,
    encode_command,
)
from controller.telemetry import ControllerTelemetry
from controller.transport import RaftTransport

__all__ = ["ControllerNode"]

logger = logging.getLogger(__name__)

SUSPECTS_MAX = 1024  # replica sets with a master probe pending at once
HEARD_POLL_MS = 20  # how often an operator's election looks for the heartbeats it waits for
AUTH_CHANGE_ATTEMPTS = 3  # a user/ACL change retried when another change committed first


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ControllerNode:
    def __init__(self, config: ControllerConfig, *, init_user: User | None = None) -> None:
        self.config = config
        # initAuthenticationUser: the leader puts it in the replicated table when missing
        self.init_user = init_user
        store = Path(config.store_path)
        store.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(store / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self._lock_fd)
            raise StoreLockedError(f"{store} is in use by another controller") from err
        self.storage = FileRaftStorage(store / "raft")
        persisted = self.storage.load()
        raft_config = RaftConfig(
            node_id=config.node_id, voter_ids=config.voter_ids,
            election_timeout_ticks=config.election_timeout_ticks,
            heartbeat_interval_ticks=config.heartbeat_interval_ticks,
        )
        self.raft = RaftNode(raft_config, random.Random(int.from_bytes(os.urandom(8), "big")),
                             hard_state=persisted.hard_state, snapshot=persisted.snapshot,
                             entries=persisted.entries)
        self.state = (ControllerState.restore(persisted.snapshot.data)
                      if persisted.snapshot is not None else ControllerState())
        self.live = LiveTable(heartbeat_timeout_ms=config.heartbeat_timeout_ms,
                              brokers_max=config.live_brokers_max)
        # This process's clock, named in heartbeat replies: an echo of another process's
        # (a controller restarted at this address) is not taken for one of ours
        self.clock_id = random.SystemRandom().getrandbits(62) + 1
        self._proposals: dict[int, tuple[int, asyncio.Future[ApplyResult]]] = {}
        self._reads: dict[int, asyncio.Future[None]] = {}
        self._read_waits: list[tuple[int, asyncio.Future[None]]] = []
        self._next_read_id = 0
        self._leader_since_ms: int | None = None
        # replica set -> (master epoch, master id) whose lease an operator's election lets
        # lapse; _election_holds: the same from a scan's decision until its election applies
        self._lease_holds: dict[str, tuple[int, int | None]] = {}
        self._election_holds: dict[str, tuple[int, int | None]] = {}
        self._election_held_at_ms: dict[str, int] = {}
        self._scan_wakeup: asyncio.Event | None = None
        self._suspects: dict[str, int] = {}  # broker_name -> master epoch a slave lost
        self._stopping: asyncio.Event | None = None
        self._transport: RaftTransport | None = None
        self._fatal: BaseException | None = None
        self.prefix = f"ctrl-{config.node_id}"
        self.telemetry = ControllerTelemetry()  # metrics and console (controller/telemetry.py)

    # -- life cycle ------------------------------------------------------------------------

    async def run(self, started: asyncio.Event | None = None) -> None:
        """Serve until `stop()`; the one long-running task group of the process."""
        self._stopping = asyncio.Event()
        self._scan_wakeup = asyncio.Event()
        peers = {peer: (host, port) for peer, host, port in self.config.peers}
        peers[self.config.node_id] = self.config.raft_bind_address()  # its own: where to listen
        self._transport = RaftTransport(
            self.config.node_id, peers, self._on_message,
            frame_bytes_max=self.config.frame_bytes_max,
            send_queue_max=self.config.send_queue_max,
            connections_max=self.config.connections_max,
            idle_timeout_ms=self.config.idle_timeout_ms,
            frame_timeout_ms=self.config.frame_timeout_ms,
            tls=self.config.tls,
        )
        try:
            async with asyncio.TaskGroup() as tasks:
                await self._transport.start(tasks)
                ticker = tasks.create_task(self._tick_loop(), name="raft-tick")
                scanner = tasks.create_task(self._scan_loop(), name="scan")
                if started is not None:
                    started.set()
                await self._stopping.wait()
                ticker.cancel()
                scanner.cancel()
                await self._transport.close()
                raise asyncio.CancelledError  # ends the senders too
        except* asyncio.CancelledError:
            pass
        finally:
            self.storage.close()
            os.close(self._lock_fd)
        if self._fatal is not None:
            raise self._fatal  # a broken invariant stops the process (never limp on)

    def _die(self, error: BaseException) -> None:
        logger.critical("%s stops: %r", self.prefix, error, exc_info=error)
        if self._fatal is None:
            self._fatal = error
        self.stop()

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    async def _tick_loop(self) -> None:
        interval_s = self.config.tick_interval_ms / 1000
        next_s = time.monotonic()
        while True:  # the Raft clock, for the life of the node
            next_s += interval_s
            await asyncio.sleep(max(0.0, next_s - time.monotonic()))
            self.raft.tick()
            self._drain()

    def _on_message(self, message: Message) -> None:
        if self._fatal is not None:
            return  # stopping after a broken invariant: touch nothing more
        if isinstance(message, SnapshotRequest) and message.term >= self.raft.term:
            try:  # the core installs it whole: it must decode as a state first
                ControllerState.restore(message.snapshot.data)
            except CodecError as err:
                self.raft.rejected_messages += 1
                logger.warning("%s rejects a snapshot from %d: %s", self.prefix,
                               message.from_id, err)
                return
        try:
            self.raft.step(message)
            self._drain()
        except Exception as err:  # noqa: BLE001 - from a connection task: stop the whole node
            self._die(err)

    # -- the Ready loop --------------------------------------------------------------------

    def _drain(self) -> None:
        raft = self.raft
        assert self._transport is not None
        while raft.has_ready():
            ready = raft.ready()
            save_ready(self.storage, ready)  # fsync before anything is sent
            for message in ready.messages:
                self._transport.send(message)
            if ready.snapshot is not None:
                self.state = ControllerState.restore(ready.snapshot.data)
            for entry in ready.committed:
                self._apply(entry)
            for read in ready.read_states:
                self._on_read_state(read)
            raft.advance(ready)
            if ready.soft_state is not None:
                self._on_soft_state(ready.soft_state.role)
        self._release_reads()
        self._maybe_compact()

    def _apply(self, entry: Entry) -> None:
        result = ApplyResult("OK")
        if entry.kind is EntryKind.NORMAL:
            try:
                command = decode_command(entry.data)
                result = self.state.apply(command)
                self.telemetry.on_applied(command, result, entry.entry_index)
            except CodecError as err:  # every node skips it the same way
                logger.error("%s skips undecodable entry %d: %s", self.prefix,
                             entry.entry_index, err)
                result = ApplyResult("INVALID_REQUEST")
        waiting = self._proposals.pop(entry.entry_index, None)
        if waiting is not None and not waiting[1].done():
            term, future = waiting
            if term == entry.term:
                future.set_result(result)
            else:
                future.set_exception(NotLeaderError(self.leader_address()))

    def _on_read_state(self, read: ReadState) -> None:
        future = self._reads.pop(read.request_id, None)
        if future is not None:
            self._read_waits.append((read.entry_index, future))

    def _release_reads(self) -> None:
        applied = self.raft.log.applied_index
        still = []
        for entry_index, future in self._read_waits:
            if entry_index <= applied:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((entry_index, future))
        self._read_waits = still

    def _on_soft_state(self, role: Role) -> None:
        logger.info("%s is %s at term %d (leader %s)", self.prefix, role.value, self.raft.term,
                    self.raft.leader_id)
        self.telemetry.on_role(role.value, self.raft.term, self.raft.leader_id)
        if role is Role.LEADER:
            self._leader_since_ms = _monotonic_ms()
            return
        self._leader_since_ms = None
        error = NotLeaderError(self.leader_address())
        futures = [f for _, f in self._proposals.values()] + list(self._reads.values())
        futures += [f for _, f in self._read_waits]
        self._proposals.clear()
        self._reads.clear()
        self._read_waits.clear()
        for future in futures:
            if not future.done():
                future.set_exception(error)

    def _maybe_compact(self) -> None:
        log, raft = self.raft.log, self.raft
        if log.applied_index - log.snapshot.entry_index < self.config.snapshot_every_entries:
            return
        if raft.has_ready() or log.applied_index > log.stable_index:
            return
        snapshot = raft.compact(log.applied_index, self.state.snapshot())
        self.storage.compact(snapshot)
        logger.info("%s compacted its log up to %d", self.prefix, snapshot.entry_index)

    # -- proposals and reads ---------------------------------------------------------------

    def leader_address(self) -> str | None:
        leader = self.raft.leader_id
        return self.config.client_address(leader) if leader is not None else None

    def _require_leader(self) -> None:
        if self.raft.role is not Role.LEADER:
            raise NotLeaderError(self.leader_address())

    async def propose(self, command: Command) -> ApplyResult:
        result = self.raft.propose(encode_command(command))
        if result.status is ProposeStatus.NOT_LEADER:
            raise NotLeaderError(self.leader_address())
        if result.status is ProposeStatus.DROPPED:
            raise BusyError("the Raft log has too many uncommitted entries")
        future: asyncio.Future[ApplyResult] = asyncio.get_running_loop().create_future()
        self._proposals[result.entry_index] = (result.term, future)
        self._drain()
        return await self._wait(future, f"entry {result.entry_index}")

    async def read_barrier(self) -> None:
        """Return once this node's state is at least as new as any committed write (ReadIndex)."""
        self._next_read_id += 1
        request_id = self._next_read_id
        result = self.raft.read_index(request_id)
        if result.status is ProposeStatus.NOT_LEADER:
            raise NotLeaderError(self.leader_address())
        if result.status is ProposeStatus.DROPPED:
            raise BusyError("too many pending reads")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reads[request_id] = future
        self._drain()
        await self._wait(future, f"read {request_id}")

    async def _wait(self, future: asyncio.Future[Any], what: str) -> Any:
        try:
            async with asyncio.timeout(self.config.request_timeout_ms / 1000):
                return await asyncio.shield(future)
        except TimeoutError as err:
            future.cancel()  # nobody waits any more: later outcomes are dropped quietly
            raise BusyError(f"{what} not done within requestTimeoutMs") from err

    # -- leader duties ---------------------------------------------------------------------

    async def _scan_loop(self) -> None:
        assert self._scan_wakeup is not None
        while True:  # the leader's failure detector, for the life of the node
            wait_ms = self.config.scan_interval_ms
            if self.raft.role is Role.LEADER:  # only the leader expires and elects
                now_ms = _monotonic_ms()
                expiry_ms = self.live.next_master_expiry_ms(self.state.replica_infos(), now_ms)
                if expiry_ms is not None:  # a master's timeout ends sooner: scan right then
                    wait_ms = max(1, min(wait_ms, expiry_ms - now_ms + 1))
            try:
                async with asyncio.timeout(wait_ms / 1000):
                    await self._scan_wakeup.wait()
            except TimeoutError:
                pass
            self._scan_wakeup.clear()
            if self.raft.role is Role.LEADER:
                await self._scan()

    async def _scan(self) -> None:
        await self._ensure_init_user()
        await self._probe_suspects()
        now_ms = _monotonic_ms()
        self.live.expire(now_ms)
        self._release_election_holds(now_ms)
        for replica in self.state.replica_infos():
            try:
                await self._maybe_elect(replica, now_ms)
            except (NotLeaderError, BusyError) as err:
                logger.info("%s could not elect for %s: %s", self.prefix, replica.broker_name,
                            err)
                return

    async def _ensure_init_user(self) -> None:
        """Put initAuthenticationUser in the table when it is not there (first start; or
        deleted: remove the key from the conf to retire it)."""
        user = self.init_user
        if user is None or self.state.auth.user(user.name) is not None:
            return
        try:
            reply = await self._change_auth(lambda auth: auth.with_user(user))
        except (NotLeaderError, BusyError) as err:
            logger.info("%s could not add initAuthenticationUser %s: %s", self.prefix,
                        user.name, err)
            return
        logger.info("%s: initAuthenticationUser %s: %s %s", self.prefix, user.name,
                    reply.status, reply.message)

    async def _probe_suspects(self) -> None:
        """Probe masters a slave lost; forget those whose address refuses connections."""
        suspects, self._suspects = self._suspects, {}
        for broker_name, epoch in suspects.items():
            replica = self.state.replica_info(broker_name)
            if (replica is None or replica.master_epoch != epoch or replica.master_address is None
                    or not self.live.is_alive(replica, replica.master_broker_id,
                                              _monotonic_ms())):
                continue
            if await _refuses_connections(replica.master_address,
                                          self.config.master_probe_timeout_ms):
                assert replica.master_broker_id is not None
                logger.info("%s: %s's master %d at %s refuses connections (a slave lost it): "
                            "dead", self.prefix, broker_name, replica.master_broker_id,
                            replica.master_address)
                # elected once every other member reported its final position
                # (election.positions_final, checked by failover_decision)
                self.live.forget(broker_name, [replica.master_broker_id])

    async def _maybe_elect(self, replica: ReplicaInfo, now_ms: int) -> None:
        decision = scan_decision(replica, self.live, now_ms,
                                 leader_since_ms=self._leader_since_ms,
                                 heartbeat_timeout_ms=self.config.heartbeat_timeout_ms,
                                 unclean_enabled=self.config.unclean_election_enabled)
        if decision is None:
            return
        logger.info("%s: %s has master %s (epoch %d), not alive or absent: proposes %s",
                    self.prefix, replica.broker_name, replica.master_broker_id,
                    replica.master_epoch, decision.broker_id)
        # From the decision until the election applies, heartbeats are answered from the
        # state not yet changed: they must not renew the old master's lease (lease_held).
        # Released once the outcome is known; with none (no answer in requestTimeoutMs, or
        # leadership lost) kept until `_release_election_holds` finds the epoch moved on or
        # the hold old enough that the entry was applied or dropped.
        name = replica.broker_name
        self._election_holds[name] = (replica.master_epoch, replica.master_broker_id)
        self._election_held_at_ms[name] = now_ms
        await self.propose(ElectMaster.decided_on(replica, decision.broker_id))
        self._election_holds.pop(name, None)  # applied (or fenced): the state says the rest

    def _release_election_holds(self, now_ms: int) -> None:
        """Drop the holds of elections whose outcome was not seen (see _maybe_elect)."""
        for name, (epoch, _) in list(self._election_holds.items()):
            replica = self.state.replica_info(name)
            if (replica is None or replica.master_epoch != epoch
                    or now_ms - self._election_held_at_ms.get(name, now_ms)
                    > 2 * self.config.request_timeout_ms):
                del self._election_holds[name]

    # -- requests --------------------------------------------------------------------------

    async def handle(self, action: str, request: JsonMessage | None) -> JsonMessage:
        """Answer one client request (already decoded); runs on the node's event loop."""
        if action == "controller_status":
            return self._status()
        if action == "broker_heartbeat":
            assert isinstance(request, BrokerHeartbeat)
            now_ms = _monotonic_ms()
            credited_ms = self.live.heard(request, now_ms, clock=self.clock_id,
                                          transit_max_ms=self.config.transit_max_ms)
            if credited_ms < now_ms:
                logger.info("%s: a late heartbeat of %s broker %d counts %d ms before its "
                            "arrival (heartbeatTransitMaxMs)", self.prefix,
                            request.broker_name, request.broker_id, now_ms - credited_ms)
        try:
            self._require_leader()
            return await getattr(self, f"_{action}")(request)
        except NotLeaderError as err:
            if action == "broker_heartbeat":  # recorded here too: the echo makes it count
                return HeartbeatReply("NOT_LEADER", err.leader_address,
                                      controller_ms=_monotonic_ms(),
                                      controller_clock=self.clock_id)
            return _not_leader(action, err.leader_address)
        except BusyError:
            return _reply_type(action)(status="BUSY", leader_address=self.leader_address())
        except (AssertionError, ControllerError, OSError) as err:
            # a broken invariant or a storage failure: stop rather than limp on
            self._die(err)
            raise
        except Exception:  # a request this handler did not foresee fails alone
            logger.exception("%s: %s failed", self.prefix, action)
            return _reply_type(action)(status="INTERNAL_ERROR",
                                       leader_address=self.leader_address())

    def _status(self) -> ControllerStatusReply:
        raft = self.raft
        digest = hashlib.blake2b(self.state.snapshot(), digest_size=8).hexdigest()
        return ControllerStatusReply(
            "OK", raft.node_id, raft.role.value, raft.term, raft.leader_id,
            self.leader_address(), raft.log.committed_index, raft.log.applied_index,
            raft.log.snapshot.entry_index, digest, raft.rejected_messages,
            self._transport.bad_frames if self._transport else 0,
            self._transport.refused_connections + self._transport.idle_closed
            if self._transport else 0,
            tuple(self.telemetry.recent_elections), self.telemetry.leader_changes,
        )

    async def _register_broker(self, request: RegisterBrokerRequest) -> RegisterBrokerReply:
        result = await self.propose(ApplyBrokerId(request.cluster_name, request.broker_name,
                                                  request.broker_address))
        return RegisterBrokerReply(result.status, None, result.broker_id, result.replica)

    async def _broker_heartbeat(self, request: BrokerHeartbeat) -> HeartbeatReply:
        replica = self.state.replica_info(request.broker_name)
        now_ms = _monotonic_ms()
        heard = answer_heartbeat(
            replica, request,
            lease_held=(not state_current(self.raft.log, self.raft.term)
                        or (replica is not None
                            and self._lease_held(replica, request.broker_id))),
            master_silent_ms=(None if replica is None
                              else self.live.silent_ms(replica, replica.master_broker_id, now_ms)),
            heartbeat_timeout_ms=self.config.heartbeat_timeout_ms)
        if heard.status != "OK":
            return HeartbeatReply(heard.status)
        assert replica is not None
        if self._scan_wakeup is not None:
            if heard.wake is Wake.ELECT:
                self._scan_wakeup.set()  # elect now, not at the next scan
            elif heard.wake is Wake.PROBE and len(self._suspects) < SUSPECTS_MAX:
                self._suspects[replica.broker_name] = replica.master_epoch
                self._scan_wakeup.set()  # probe the master now (or elect, once every slave told)
        return HeartbeatReply("OK", None, heard.role,
                              heartbeat_timeout_ms=self.config.heartbeat_timeout_ms,
                              master_silent=heard.master_silent,
                              auth_version=self.state.auth.version,
                              controller_ms=now_ms, controller_clock=self.clock_id,
                              # now_ms is not before handle's: this is not less than the
                              # credit recorded there was behind (a shorter lease: safe)
                              credit_behind_ms=now_ms - self._credit_ms(request, now_ms))

    def _credit_ms(self, request: BrokerHeartbeat, arrived_ms: int) -> int:
        return heartbeat_credit_ms(request, arrived_ms, clock=self.clock_id,
                                   transit_max_ms=self.config.transit_max_ms)

    async def _get_replica_info(self, request: GetReplicaInfoRequest) -> ReplicaInfoReply:
        await self.read_barrier()
        return self._replica_reply("OK", request.broker_name)

    def _replica_reply(self, status: str, broker_name: str) -> ReplicaInfoReply:
        replica = self.state.replica_info(broker_name)
        if replica is None:
            return ReplicaInfoReply("REPLICA_SET_NOT_FOUND" if status == "OK" else status)
        alive = tuple(sorted(self.live.alive(replica, _monotonic_ms())))
        return ReplicaInfoReply(status, None, replica, alive)

    async def _alter_sync_state_set(
        self, request: AlterSyncStateSetRequest
    ) -> AlterSyncStateSetReply:
        replica = self.state.replica_info(request.broker_name)
        alive = {} if replica is None else self.live.alive(replica, _monotonic_ms())
        refusal = refuse_sync_state_set(replica, request.sync_state_set, alive)
        if refusal is not None:
            if replica is None:
                return AlterSyncStateSetReply(refusal)
            return AlterSyncStateSetReply(refusal, None, replica.sync_state_set,
                                          replica.sync_state_set_epoch)
        result = await self.propose(AlterSyncStateSet(
            request.broker_name, request.master_broker_id, request.master_epoch,
            request.sync_state_set, request.sync_state_set_epoch,
        ))
        info = result.replica
        return AlterSyncStateSetReply(result.status, None, info.sync_state_set if info else (),
                                      info.sync_state_set_epoch if info else 0)

    async def _elect_master(self, request: ElectMasterRequest) -> ReplicaInfoReply:
        await self.read_barrier()
        replica = self.state.replica_info(request.broker_name)
        if replica is None:
            return ReplicaInfoReply("REPLICA_SET_NOT_FOUND")
        if request.broker_name in self._lease_holds:  # one operator election per set at once
            return self._replica_reply("BUSY", request.broker_name)
        election = choose_master(
            replica, self.live.alive(replica, _monotonic_ms()),
            designated_broker_id=request.designated_broker_id,
            unclean_enabled=self.config.unclean_election_enabled,
        )
        if (election.status == "OK" and election.broker_id != replica.master_broker_id
                and self.live.is_alive(replica, replica.master_broker_id, _monotonic_ms())):
            return await self._replace_live_master(replica, request)
        if election.status == "OK" or (
            election.status == "MASTER_NOT_AVAILABLE" and replica.master_broker_id is not None
        ):
            result = await self.propose(ElectMaster.decided_on(replica, election.broker_id))
            return self._replica_reply(result.status, request.broker_name)
        return self._replica_reply(election.status, request.broker_name)

    async def _replace_live_master(self, replica: ReplicaInfo, request: ElectMasterRequest
                                   ) -> ReplicaInfoReply:
        """An operator's election that replaces a master which still heartbeats.

        Why (DESIGN §5.7): while its lease holds, a master acks by its quorum rule, with the
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
        since = self._leader_since_ms
        if since is None or _monotonic_ms() - since < self.config.heartbeat_timeout_ms:
            return self._replica_reply("BUSY", name)
        term = self.raft.term
        self._lease_holds[name] = (replica.master_epoch, replica.master_broker_id)
        logger.info("%s: %s: electing broker %s in place of master %s once its lease has "
                    "lapsed", self.prefix, name, request.designated_broker_id,
                    replica.master_broker_id)
        try:
            held_at_ms = _monotonic_ms()
            master_heard = await self._heard_since(
                replica, replica.master_broker_id, held_at_ms, 0, lease_lapsed=True,
                wait_max_ms=lease_max_ms(self.config.heartbeat_timeout_ms)
                + self.config.heartbeat_timeout_ms)
            if master_heard is None:  # silent, or its lease never lapsed
                return self._replica_reply("ELECT_MASTER_FAILED", name)
            await self.read_barrier()
            current = self.state.replica_info(name)
            if (self.raft.term != term or current is None
                    or current.master_epoch != replica.master_epoch):
                return self._replica_reply("ELECT_MASTER_FAILED", name)  # changed meanwhile
            election = choose_master(
                current, self.live.alive(current, _monotonic_ms()),
                designated_broker_id=request.designated_broker_id,
                unclean_enabled=self.config.unclean_election_enabled)
            if election.status != "OK" or election.broker_id == current.master_broker_id:
                return self._replica_reply(election.status, name)
            # Puts acked before the lapse were on a quorum, not necessarily on the chosen one.
            chosen_heard = await self._heard_since(
                current, election.broker_id, master_heard[1], master_heard[0],
                wait_max_ms=self.config.heartbeat_timeout_ms)
            if chosen_heard is None or self.raft.term != term:
                return self._replica_reply("ELECT_MASTER_FAILED", name)
            result = await self.propose(ElectMaster.decided_on(current, election.broker_id))
            return self._replica_reply(result.status, name)
        finally:
            self._lease_holds.pop(name, None)  # after the commit: the old master is a slave

    def _lease_held(self, replica: ReplicaInfo, broker_id: int) -> bool:
        """Is `broker_id` the master whose lease an election (decided by a scan, or an
        operator's) is letting lapse? (leader_core.lease_held)"""
        return (lease_held(self._lease_holds, replica, broker_id)
                or lease_held(self._election_holds, replica, broker_id))

    async def _heard_since(self, replica: ReplicaInfo, broker_id: int | None, since_ms: int,
                           position_min: int, *, wait_max_ms: int, lease_lapsed: bool = False
                           ) -> tuple[int, int] | None:
        """Wait (at most `wait_max_ms`) for a heartbeat of `broker_id` received at `since_ms`
        or later that reports a log position >= `position_min` (and, with `lease_lapsed`,
        that its master lease had lapsed); its (position, received_ms)."""
        deadline_ms = _monotonic_ms() + wait_max_ms
        while _monotonic_ms() < deadline_ms:
            heard = self.live.position_heard_since(replica, broker_id, since_ms,
                                                   lease_lapsed=lease_lapsed)
            if heard is not None and heard[0] >= position_min:
                return heard
            await asyncio.sleep(HEARD_POLL_MS / 1000)
        return None

    async def _clean_broker_data(self, request: CleanBrokerDataRequest) -> ReplicaInfoReply:
        await self.read_barrier()
        replica = self.state.replica_info(request.broker_name)
        if replica is None:
            return ReplicaInfoReply("REPLICA_SET_NOT_FOUND")
        alive = self.live.alive(replica, _monotonic_ms())
        targets = set(request.broker_ids) or {m.broker_id for m in replica.brokers}
        if targets & set(alive):
            return ReplicaInfoReply("BROKER_ALIVE", None, replica, tuple(sorted(alive)))
        result = await self.propose(CleanBrokerData(request.broker_name, request.broker_ids))
        if result.status == "OK":
            self.live.forget(request.broker_name, request.broker_ids)
        return self._replica_reply(result.status, request.broker_name) if result.replica else (
            ReplicaInfoReply(result.status))

    # -- users and ACLs (replicated: every change is a SetAuth entry) ------------------------

    async def _get_auth_data(self, request: None) -> AuthDataReply:
        await self.read_barrier()
        return AuthDataReply("OK", None, self.state.auth)

    async def _user_list(self, request: None) -> UsersReply:
        await self.read_barrier()
        return UsersReply("OK", None, self.state.auth.users)

    async def _acl_list(self, request: AclListRequest) -> AclListReply:
        await self.read_barrier()
        return AclListReply("OK", None, tuple(
            policy for policy in self.state.auth.policies
            if not request.subject or policy.subject == request.subject))

    async def _change_auth(self, change: Any) -> AuthChangeReply:
        """Apply `change(current table) -> new table` through Raft (compare-and-set on the
        version, retried when another change committed first)."""
        for _ in range(AUTH_CHANGE_ATTEMPTS):
            await self.read_barrier()
            current = self.state.auth
            try:
                new = change(current)
            except AclError as err:
                return AuthChangeReply("INVALID_REQUEST", None, current.version, str(err))
            result = await self.propose(SetAuth(current.version, new))
            if result.status != "FENCED_AUTH_VERSION":
                return AuthChangeReply(result.status, None, self.state.auth.version)
        return AuthChangeReply("BUSY", self.leader_address(), self.state.auth.version)

    async def _user_create(self, request: UserRequest) -> AuthChangeReply:
        def change(auth: AuthData) -> AuthData:
            if auth.user(request.name) is not None:
                raise AclError(f"user {request.name} exists (user update changes it)")
            return auth.with_user(User(request.name, request.access_key or request.name,
                                       request.secret_key, request.type or "Normal",
                                       request.status or "enabled"))
        return await self._change_auth(change)

    async def _user_update(self, request: UserRequest) -> AuthChangeReply:
        def change(auth: AuthData) -> AuthData:
            old = auth.user(request.name)
            if old is None:
                raise AclError(f"no user {request.name}")
            return auth.with_user(User(request.name, request.access_key or old.access_key,
                                       request.secret_key or old.secret_key,
                                       request.type or old.kind, request.status or old.status))
        return await self._change_auth(change)

    async def _user_delete(self, request: UserNameRequest) -> AuthChangeReply:
        def change(auth: AuthData) -> AuthData:
            if auth.user(request.name) is None:
                raise AclError(f"no user {request.name}")
            if self.init_user is not None and request.name == self.init_user.name:
                raise AclError(f"{request.name} is initAuthenticationUser (remove that key "
                               "from the controllers' conf first)")
            return auth.without_user(request.name)
        return await self._change_auth(change)

    async def _acl_create(self, request: AclRequest) -> AuthChangeReply:
        return await self._change_auth(lambda auth: _with_acl(auth, request, create=True))

    async def _acl_update(self, request: AclRequest) -> AuthChangeReply:
        return await self._change_auth(lambda auth: _with_acl(auth, request, create=False))

    async def _acl_delete(self, request: AclDeleteRequest) -> AuthChangeReply:
        def change(auth: AuthData) -> AuthData:
            new = auth.without_policies(request.subject, request.resources)
            if len(new.policies) == len(auth.policies):
                raise AclError(f"no policy of {request.subject} for {list(request.resources)}")
            return new
        return await self._change_auth(change)

    async def _get_routes(self, request: GetRoutesRequest) -> JsonMessage:
        return self.live.routes(request.topic, self.state.replica_infos(), _monotonic_ms())

    async def _cluster_list(self, request: None) -> ClusterListReply:
        await self.read_barrier()
        now_ms = _monotonic_ms()
        controllers = []
        for peer in self.config.voter_ids:
            if peer == self.raft.node_id:
                role = Role.LEADER.value
            else:
                progress = self.raft.progress.get(peer)
                role = "follower" if progress and progress.match_index > 0 else "unknown"
            controllers.append(ControllerMember(peer, self.config.client_address(peer), role))
        sets = tuple(
            ReplicaSetStatus(replica, tuple(sorted(self.live.alive(replica, now_ms))))
            for replica in self.state.replica_infos()
        )
        return ClusterListReply("OK", None, tuple(controllers), sets)


def _with_acl(auth: AuthData, request: AclRequest, *, create: bool) -> AuthData:
    """acl create/update: one entry per resource for an existing user."""
    name = request.subject.partition(":")[2]
    if auth.user(name) is None:
        raise AclError(f"no user {name!r} (subject {request.subject!r}); create it first")
    if not request.resources:
        raise AclError("no resource")
    policies = [Policy(request.subject, resource, request.actions, request.decision,
                       request.source_ips) for resource in request.resources]
    existing = {policy.key for policy in auth.policies}
    if create and any(policy.key in existing for policy in policies):
        raise AclError(f"{request.subject} already has a policy for one of "
                       f"{list(request.resources)} (acl update replaces it)")
    if not create and any(policy.key not in existing for policy in policies):
        raise AclError(f"{request.subject} has no policy for one of {list(request.resources)} "
                       "(acl create adds it)")
    return auth.with_policies(policies)


def _reply_type(action: str) -> type[Any]:
    return ACTIONS[action][1]


async def _refuses_connections(address: str, timeout_ms: int) -> bool:
    """True only when a TCP connect to `address` is refused (nothing listens there)."""
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            _reader, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    return False


def _not_leader(action: str, leader_address: str | None) -> JsonMessage:
    reply: JsonMessage = _reply_type(action)(status="NOT_LEADER", leader_address=leader_address)
    return reply

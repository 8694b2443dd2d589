"""Controller mode: turn the controller's RoleChanges into this broker's role, at runtime.

    ControllerLink ──RoleChange (newer epoch / SyncStateSet)──> RoleManager.submit (never blocks)
                                                                   │ latest one wins
    thread role-change:                                            ▼
        master, epoch E     become_master: fence, stop following, cut a partial tail, confirm
                            := log end, epoch entry E, master service with the controller's
                            SyncStateSet; bring the idempotence table up to the log's end (a
                            slave keeps it current every second: IdempotenceFollower); start
                            the tier uploader; lift the fence (writes accepted)
        master, same E      adopt a newer accepted SyncStateSet
        slave of X, E       fence; stop the master service and the uploader; follow X (its
                            advertised HA address, brokerIP2:haListenPort, from X's
                            broker_info, only once X says it is master of E or newer); X's
                            handshake truncates this log's fork
        none                fence; stop a master service (a slave keeps trying its master)

    master lease (link threads): every leader's reply naming this broker master of epoch E
        renews the lease of E's master service to the heartbeat's send time + masterLeaseMs
        (at most 2/3 of the controller's controllerHeartbeatTimeoutMs); the latest one is kept
        for a take-over of E that has not started its service yet (ha/replication/master_core.py: a
        master whose lease lapsed acks only what every slave holds)

    restarted master: named master of an epoch its previous process may have served, it
        stays fenced and its heartbeats abandon that epoch (ha/replication/role_core.py REELECT);
        the controller elects again under a new epoch

    thread sss-report (while master): when the local SyncStateSet differs from the accepted one
        (or a proposal still in flight must be fenced: MasterService.proposal_pending),
        alter_sync_state_set(master id, E, local set, syncStateSetEpoch) at the controller
        leader, recorded first as in flight (its slaves count until a newer set is accepted); OK ->
        the master uses the accepted set; a fenced or refused answer -> refresh with
        get_replica_info (adopt the controller's set when it still names us master of E), then try
        again after SSS_RETRY_INTERVAL_MS.

Single-broker sets (no replication) only fence and unfence, as before. The controller being
down never changes a role: the last one stays (docs/design.md §5.6).

The decisions (which action a change means, the lease arithmetic, when to propose a set and
whether to adopt the controller's) are ha/replication/role_core.py's; this module is the shell that
carries them out on threads (the simulator drives the same core: tests/sim/cluster_sim.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from controller.api import (
    AlterSyncStateSetReply,
    GetReplicaInfoRequest,
    ReplicaInfoReply,
    RoleChange,
)
from ha.broker.controller_link import ControllerClient, ControllerUnavailableError
from ha.broker.idempotence import IdempotenceConfig, IdempotenceFollower, rebuild_table
from ha.broker.peer import broker_info
from ha.broker.replication import RoleChangeError
from ha.broker.service import BrokerService
from ha.replication.master_service import MasterService
from ha.replication.role_core import RoleAction, RoleCore, RolePlan
from storage_engine.tiered import TierService

__all__ = ["RoleManager"]

logger = logging.getLogger("rocketha.broker.roles")

ROLE_RETRY_INTERVAL_MS = 1000  # a failed role change is tried again after this
FOLLOWER_PASS_INTERVAL_MS = 1000  # a slave updates its idempotence table this often
SSS_RETRY_INTERVAL_MS = 200  # pause after a refused or failed SyncStateSet proposal
SSS_POLL_INTERVAL_MS = 1000  # a proposal is also re-checked this often without a change
MASTER_INFO_TIMEOUT_S = 1.0  # one broker_info call to the named master


class RoleManager:
    """Applies role changes on its own thread, so heartbeats never wait for a take-over."""

    def __init__(self, service: BrokerService, client: ControllerClient,
                 tier: TierService | None) -> None:
        self._service = service
        self._replication = service.replication
        self._config = service.config
        self._client = client
        self._tier = tier
        self._lock = threading.Condition()
        self._pending: RoleChange | None = None
        self._core = RoleCore(broker_name=self._config.broker_name,
                              runtime_roles=self._config.runtime_roles,
                              master_lease_ms=self._config.master_lease_ms)
        self._master: MasterService | None = None  # the master service of this term
        self._follower: IdempotenceFollower | None = None  # as slave: the table, kept current
        self._lease_lock = threading.Lock()  # confirm() runs on the link's threads
        self._sss_wake = threading.Event()
        self._stopping = threading.Event()
        self.on_master_lost: Callable[[], None] | None = None  # the link's wake(), set later
        self.role_changes = 0
        self.last_error = ""
        self._threads = [threading.Thread(target=self._role_loop, name="role-change",
                                          daemon=True)]
        if self._config.runtime_roles:
            self._threads.append(threading.Thread(target=self._sss_loop, name="sss-report",
                                                  daemon=True))

    def start(self) -> RoleManager:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._sss_wake.set()
        with self._lock:
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout=15)

    def submit(self, change: RoleChange) -> None:
        """The link learned a newer role (called on its threads; returns at once)."""
        with self._lock:
            self._pending = change
            self._lock.notify_all()

    def confirm(self, change: RoleChange, sent_ms: int, controller_timeout_ms: int) -> None:
        """The controller leader answered a heartbeat sent at `sent_ms` (monotonic) with this
        broker's role (called on the link's threads; never blocks on a role change)."""
        with self._lease_lock:
            until_ms = self._core.confirm(change, sent_ms, controller_timeout_ms)
        if until_ms is None:
            return
        master = self._replication.master
        if master is not None and master.master_epoch == change.master_epoch:
            master.renew_lease(until_ms)

    def master_lease_lapsed(self) -> bool:
        """Is this broker master with a lease that has lapsed (no controller reply naming it
        master for the lease's length)? For the heartbeat: an operator's election of another
        master waits for it."""
        with self._lease_lock:
            return self._core.master_lease_lapsed(int(time.monotonic() * 1000))

    def abandoned_epoch(self) -> int:
        """For the heartbeat: the master epoch this broker refuses to continue (0: none)."""
        return self._core.abandoned_epoch

    def _lease_until_ms(self, master_epoch: int) -> int:
        """The lease the controller's latest confirmation gives the master of `master_epoch`
        (0: none yet, the lease has lapsed)."""
        with self._lease_lock:
            return self._core.lease_until_ms(master_epoch)

    def info(self) -> dict[str, object]:
        current = self._core.current
        return {"applied_role": current.role if current else None,
                "applied_master_epoch": current.master_epoch if current else None,
                "sync_state_set_epoch": self._core.sync_state_set_epoch,
                "role_changes": self.role_changes,
                "last_error": self.last_error}

    # -- role changes -----------------------------------------------------------------------
    def _role_loop(self) -> None:
        while not self._stopping.is_set():
            with self._lock:
                if self._pending is None and not self._stopping.is_set():
                    self._lock.wait(FOLLOWER_PASS_INTERVAL_MS / 1000.0)
                change, self._pending = self._pending, None
            if change is None:
                self._follower_pass()
                continue
            try:
                self._apply(change)
            except Exception as err:  # the broker stays fenced; try again unless superseded
                self.last_error = f"{type(err).__name__}: {err}"
                logger.exception("role change to %s (epoch %d) failed; retrying in %d ms",
                                 change.role, change.master_epoch, ROLE_RETRY_INTERVAL_MS)
                self._stopping.wait(ROLE_RETRY_INTERVAL_MS / 1000.0)
                with self._lock:
                    if self._pending is None:
                        self._pending = change  # the link sends a role only when it is new

    def _apply(self, change: RoleChange) -> None:
        replication, core = self._replication, self._core
        plan = core.plan(change)
        action = plan.action
        if action in (RoleAction.FENCE, RoleAction.UNFENCE):  # one broker: nothing replicates
            replication.fence(plan.reason or None)
            core.applied(plan)
            return
        if action is RoleAction.ADOPT:
            self._adopt(change.sync_state_set, change.sync_state_set_epoch)
        else:
            core.leaving()
            self._master = None
            if action is RoleAction.TAKE_OVER:
                self._take_over(plan)
            elif action is RoleAction.FOLLOW:
                self._follow(change)
            else:  # NONE, or REELECT: no master here until the controller elects again
                if self._tier is not None:
                    self._tier.set_uploading(False)
                replication.become_none(plan.reason)
        core.applied(plan)
        self.role_changes += 1
        if action is RoleAction.REELECT:
            logger.warning("%s: %s", self._config.broker_name, plan.reason)
            self._master_lost()  # heartbeat now: the controller elects on master_epoch_abandoned

    def _idempotence_config(self) -> IdempotenceConfig:
        config = self._config
        return IdempotenceConfig(producers_max=config.idempotence_producers_max,
                                 window_messages=config.idempotence_rebuild_messages,
                                 window_ms=config.idempotence_rebuild_window_ms,
                                 batches_max=config.idempotence_batches_kept)

    def _follower_pass(self) -> None:
        """As slave: bring the idempotence table up to date (so a take-over reads little)."""
        follower = self._follower
        if follower is None or self._replication.slave is None:
            return
        try:
            follower.catch_up(now_ms=int(time.time() * 1000))
        except Exception:  # the take-over rebuilds what is missing; never stop the thread
            logger.exception("idempotence follower pass failed")
            self._follower = None

    def _take_over(self, plan: RolePlan) -> None:
        change = plan.change
        started = time.monotonic()
        last = self._service.store.epochs.last
        refusal = self._core.check_take_over(last.epoch if last else None, change.master_epoch)
        if refusal is not None:
            self._replication.fence(f"refusing to take over: {refusal}")
            raise RoleChangeError(refusal)
        master = self._replication.become_master(
            broker_id=change.broker_id, master_epoch=change.master_epoch,
            sync_state_set=change.sync_state_set,
            on_sync_state_set=lambda _members: self._sss_wake.set(),
            lease_until_ms=self._lease_until_ms(change.master_epoch),
            sync_state_set_epoch=change.sync_state_set_epoch)
        master.renew_lease(self._lease_until_ms(change.master_epoch))  # one that came meanwhile
        service, config = self._service, self._config
        now_ms = int(time.time() * 1000)
        follower, self._follower = self._follower, None
        service.idempotence.replace_table(
            follower.catch_up(now_ms=now_ms) if follower is not None
            else rebuild_table(service.store, self._idempotence_config(), now_ms=now_ms))
        if self._tier is not None:
            self._tier.set_uploading(True)
        self._master = master
        # LiftFence, the last step of ha/replication/takeover_core.py's plan
        self._replication.fence(None)
        self._sss_wake.set()
        logger.info("%s: master of epoch %d after a %.0f ms take-over (log end %d)",
                    config.broker_name, change.master_epoch,
                    (time.monotonic() - started) * 1000, service.store.log_position_end)

    def _follow(self, change: RoleChange) -> None:
        if self._follower is None:
            self._follower = IdempotenceFollower(self._service.store, self._idempotence_config())
        if self._tier is not None:
            self._tier.set_uploading(False)
        endpoint = change.master_address
        assert endpoint is not None
        epoch = change.master_epoch
        host = endpoint.rpartition(":")[0]
        tls = self._service.config.tls.client()

        def resolve() -> tuple[str, int] | None:
            info = broker_info(endpoint, MASTER_INFO_TIMEOUT_S, tls,
                               getattr(self._service, "inner_credentials", None))
            if (info is None or info.get("role") != "MASTER"
                    or int(info.get("master_epoch", -1)) < epoch
                    or not isinstance(info.get("ha_listen_port"), int)):
                return None
            advertised = info.get("ha_address")  # brokerIP2:haListenPort
            if isinstance(advertised, str) and advertised.rpartition(":")[0]:
                return advertised.rpartition(":")[0], int(info["ha_listen_port"])
            return host, int(info["ha_listen_port"])  # a master from before brokerIP2

        self._replication.become_slave(broker_id=change.broker_id, master_epoch=epoch,
                                       master_endpoint=endpoint, resolve_master=resolve,
                                       on_link_down=self._master_lost)

    def _master_lost(self) -> None:
        wake = self.on_master_lost
        if wake is not None:
            wake()

    def _adopt(self, members: tuple[int, ...], sss_epoch: int) -> None:
        """The controller holds `members` at `sss_epoch`: use it if newer than what we have."""
        master = self._master
        if master is None or not self._core.adopt(members, sss_epoch):
            return
        master.accept_sync_state_set(members, sss_epoch)
        logger.info("SyncStateSet %s accepted (epoch %d)", list(members), sss_epoch)

    # -- SyncStateSet reports ---------------------------------------------------------------
    def _sss_loop(self) -> None:
        while not self._stopping.is_set():
            self._sss_wake.wait(SSS_POLL_INTERVAL_MS / 1000.0)
            self._sss_wake.clear()
            if self._stopping.is_set():
                return
            try:
                if not self._report_once():
                    self._stopping.wait(SSS_RETRY_INTERVAL_MS / 1000.0)
                    self._sss_wake.set()
            except Exception:  # the next round tries again
                logger.exception("SyncStateSet report failed")
                self._stopping.wait(SSS_RETRY_INTERVAL_MS / 1000.0)

    def _report_once(self) -> bool:
        """Propose the local set when it differs; True when nothing is left to do."""
        master, current = self._master, self._core.current
        if master is None or current is None:
            return True
        local, accepted = master.sync_state_sets()
        request = self._core.proposal(local, accepted, pending=master.proposal_pending())
        if request is None:
            return True
        # before it leaves: from now on the controller may commit it (ha/replication/master_core.py)
        master.proposing(request.sync_state_set, request.sync_state_set_epoch)
        try:
            reply = self._client.call("alter_sync_state_set", request, AlterSyncStateSetReply)
        except ControllerUnavailableError as err:
            logger.warning("SyncStateSet %s not reported: %s", list(local), err)
            return False
        if reply.status == "OK":
            if self._master is master:
                self._adopt(reply.sync_state_set, reply.sync_state_set_epoch)
            return True
        logger.info("SyncStateSet %s refused (%s): refreshing", list(local), reply.status)
        self._refresh(master, current)
        return False

    def _refresh(self, master: MasterService, current: RoleChange) -> None:
        try:
            reply = self._client.call("get_replica_info",
                                      GetReplicaInfoRequest(self._config.broker_name),
                                      ReplicaInfoReply)
        except ControllerUnavailableError:
            return
        replica = reply.replica if reply.status == "OK" else None
        if self._master is master and self._core.refresh_adopts(replica, current):
            assert replica is not None
            self._adopt(replica.sync_state_set, replica.sync_state_set_epoch)


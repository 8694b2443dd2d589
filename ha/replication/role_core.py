"""The broker's role decisions in controller mode, as a sans-IO core: facts in, decisions out.

The shells (ha/broker/controller_link.py: heartbeats; ha/broker/roles.py: the role-change and
SyncStateSet-report threads) carry out what this core decides; the deterministic simulator
(tests/sim/cluster_sim.py) drives the same core. Nothing here reads a clock, touches a socket
or a file: times come in as arguments (monotonic ms).

    role changes (RoleChange from a leader's heartbeat reply)

        link: offer(change) -> True when it is newer than the last one seen (`newer`: master
              epoch, then SyncStateSet epoch, then "a role" over "none") -> roles.submit
        roles: plan(change) -> the action for the last change applied:

            single-broker set (no replication)     FENCE / UNFENCE
            master, same epoch, service running    ADOPT (a newer accepted SyncStateSet)
            master of an epoch this process may     REELECT (below)
            not have seen begin
            master (new epoch, or no service)      TAKE_OVER (check_take_over: the local epoch
                                                   file must not end past the controller's
                                                   epoch; the term opens at that epoch)
            slave with a master address            FOLLOW
            otherwise                              NONE (fenced, no master service)

        applied(change) once the shell carried the action out (a failed take-over is not
        applied: the shell retries it, the broker stays fenced meanwhile)

    one master per epoch, one log per epoch: a broker takes over epoch E only when this process
        applied a role of an older epoch first (so E was elected after it started). Otherwise E
        may be a term its previous incarnation served: a crash lost that process's unsynced
        tail, which slaves may hold, and continuing E would write other bytes at the same
        positions under the same epoch, where the Epoch-StartOffset rule finds no fork (cluster
        simulation, seed 275: replicas differed below the confirm position). So it plans
        REELECT: fenced, it reports `abandoned_epoch` in its heartbeats and the controller
        elects again at once (controller/election.py), this broker included, under a new epoch.
        RocketMQ's restarted master continues the epoch and re-appends it at its new log end,
        which leaves slaves' epoch files disagreeing with it on the same epoch.

    master lease: confirm(change, sent_ms, controller_timeout_ms) -> until_ms: the heartbeat's
        send time + min(masterLeaseMs, lease_max_ms(controllerHeartbeatTimeoutMs)); the latest
        (epoch, until) is kept (`lease_until_ms(epoch)`), for a take-over that starts later

    SyncStateSet (while master): proposal(local, accepted, pending) -> the
        AlterSyncStateSetRequest to send when the local set differs from the accepted one (or,
        `pending`, an older proposal must be fenced); adopt(members, epoch) -> True
        when the controller's set is newer than the one in use; on a refusal, refresh_adopts()
        says whether the controller's replica info may be adopted (it still names us master of
        this epoch)
"""

from __future__ import annotations

import dataclasses
import enum

from controller.api import (
    ROLE_MASTER,
    ROLE_SLAVE,
    AlterSyncStateSetRequest,
    ReplicaInfo,
    RoleChange,
    lease_max_ms,
)

__all__ = ["RoleAction", "RoleCore", "RolePlan", "newer", "not_master_reason"]


class RoleAction(enum.Enum):
    FENCE = "FENCE"  # single-broker set: take no writes
    UNFENCE = "UNFENCE"  # single-broker set: this broker is master
    ADOPT = "ADOPT"  # same master term: use the newer accepted SyncStateSet
    TAKE_OVER = "TAKE_OVER"  # become master of change.master_epoch
    REELECT = "REELECT"  # named master of an epoch that may predate this process: ask for a
    #                      new one (fenced, no service; heartbeats say master_epoch_abandoned)
    FOLLOW = "FOLLOW"  # become the slave of change.master_address
    NONE = "NONE"  # no master here: fence, stop a master service


@dataclasses.dataclass(frozen=True, slots=True)
class RolePlan:
    action: RoleAction
    change: RoleChange
    reason: str = ""  # why writes are fenced (FENCE, FOLLOW, NONE)


def newer(change: RoleChange, current: RoleChange | None) -> bool:
    """Epochs order role changes; within an epoch a newer SyncStateSet or a role learnt."""
    if current is None:
        return True
    def key(c: RoleChange) -> tuple[int, int, bool]:
        return (c.master_epoch, c.sync_state_set_epoch, c.role != "none")
    return key(change) > key(current)


def not_master_reason(change: RoleChange) -> str:
    if change.role == ROLE_SLAVE:
        return (f"the controller names broker {change.master_broker_id} at "
                f"{change.master_address} master (epoch {change.master_epoch})")
    return f"replica set {change.broker_name} has no master (epoch {change.master_epoch})"


class RoleCore:
    """One broker's role state. Not thread-safe: each shell serialises its calls (the link
    under its lock, the role thread alone; the lease under the shell's lease lock)."""

    def __init__(self, *, broker_name: str, runtime_roles: bool, master_lease_ms: int) -> None:
        self.broker_name = broker_name
        self.runtime_roles = runtime_roles  # False: a single-broker set (nothing replicates)
        self.master_lease_ms = master_lease_ms
        self.seen: RoleChange | None = None  # the newest change the link passed on
        self.current: RoleChange | None = None  # the last change applied
        self.serving_master = False  # a master service of current's term runs
        self.sync_state_set_epoch = 0  # of the accepted set the master service uses
        self.abandoned_epoch = 0  # REELECT applied: the master epoch this broker gives up
        self._lease: tuple[int, int] = (0, 0)  # (master epoch, until ms) confirmed last

    # -- role changes -----------------------------------------------------------------------
    def offer(self, change: RoleChange) -> bool:
        """The link got `change` for this broker; True when the shell must act on it."""
        if not newer(change, self.seen):
            return False
        self.seen = change
        return True

    def plan(self, change: RoleChange) -> RolePlan:
        """What applying `change` means, given the last change applied."""
        if not self.runtime_roles:
            if change.role == ROLE_MASTER:
                return RolePlan(RoleAction.UNFENCE, change)
            return RolePlan(RoleAction.FENCE, change, not_master_reason(change))
        current = self.current
        same_term = (current is not None and current.role == change.role
                     and current.master_epoch == change.master_epoch)
        if change.role == ROLE_MASTER and same_term and self.serving_master:
            return RolePlan(RoleAction.ADOPT, change)
        if change.role == ROLE_MASTER and (current is None
                                           or current.master_epoch >= change.master_epoch):
            return RolePlan(RoleAction.REELECT, change,
                            f"named master of epoch {change.master_epoch}, which may predate "
                            "this process: waiting for the controller to elect a new epoch")
        if change.role == ROLE_MASTER:
            return RolePlan(RoleAction.TAKE_OVER, change)
        if change.role == ROLE_SLAVE and change.master_address:
            return RolePlan(RoleAction.FOLLOW, change, not_master_reason(change))
        return RolePlan(RoleAction.NONE, change, not_master_reason(change))

    def applied(self, plan: RolePlan) -> None:
        """The shell carried `plan` out."""
        change = plan.change
        if plan.action is RoleAction.TAKE_OVER:
            self.serving_master = True
            self.sync_state_set_epoch = change.sync_state_set_epoch
        elif plan.action in (RoleAction.FOLLOW, RoleAction.NONE, RoleAction.REELECT):
            self.serving_master = False
        self.abandoned_epoch = change.master_epoch if plan.action is RoleAction.REELECT else 0
        self.current = change

    def leaving(self) -> None:
        """A role change started: no master service is in use until it is applied."""
        self.serving_master = False

    @staticmethod
    def check_take_over(last_local_epoch: int | None, master_epoch: int) -> str | None:
        """Why this store cannot open the term `master_epoch` (None: it can). A local epoch
        file past the controller's epoch means the controller's state went back: never append
        an older epoch after a newer one (fencing tokens only grow)."""
        if last_local_epoch is not None and last_local_epoch > master_epoch:
            return (f"the local epoch file ends at epoch {last_local_epoch}, newer than the "
                    f"controller's master epoch {master_epoch}")
        return None

    # -- master lease -----------------------------------------------------------------------
    def confirm(self, change: RoleChange, sent_ms: int, controller_timeout_ms: int
                ) -> int | None:
        """A leader answered a heartbeat sent at `sent_ms` with this broker's role: the lease
        end it gives the master of change.master_epoch (None: not a master)."""
        if change.role != ROLE_MASTER:
            return None
        lease_ms = self.master_lease_ms
        if controller_timeout_ms > 0:
            lease_ms = min(lease_ms, lease_max_ms(controller_timeout_ms))
        until_ms = sent_ms + lease_ms
        epoch, until_before = self._lease
        if change.master_epoch > epoch or (change.master_epoch == epoch
                                           and until_ms > until_before):
            self._lease = (change.master_epoch, until_ms)
        return until_ms

    def lease_until_ms(self, master_epoch: int) -> int:
        """The lease the latest confirmation gives the master of `master_epoch` (0: none)."""
        epoch, until_ms = self._lease
        return until_ms if epoch == master_epoch else 0

    def master_lease_lapsed(self, now_ms: int) -> bool:
        """Is this broker master of the applied term with a lease that has lapsed at `now_ms`
        (for the heartbeat: an operator's election of another master waits for it)?"""
        current = self.current
        if current is None or current.role != ROLE_MASTER:
            return False
        return now_ms >= self.lease_until_ms(current.master_epoch)

    # -- SyncStateSet -----------------------------------------------------------------------
    def proposal(self, local: tuple[int, ...], accepted: tuple[int, ...] | None, *,
                 pending: bool = False) -> AlterSyncStateSetRequest | None:
        """The proposal to send while master (None: nothing to propose). `pending`: an
        earlier proposal naming slaves outside the accepted set may still be committed
        (MasterReplication.proposal_pending): the local set goes out even when it equals the
        accepted one; the controller accepts it as a new SyncStateSet epoch, which fences the
        earlier one."""
        current = self.current
        if not self.serving_master or current is None or accepted is None:
            return None
        if set(local) == set(accepted) and not pending:
            return None
        return AlterSyncStateSetRequest(self.broker_name, current.broker_id,
                                        current.master_epoch, local,
                                        self.sync_state_set_epoch)

    def adopt(self, members: tuple[int, ...], sync_state_set_epoch: int) -> bool:
        """The controller holds `members` at `sync_state_set_epoch`: True when the master
        service must use it (it is newer than the set in use)."""
        if not self.serving_master or sync_state_set_epoch <= self.sync_state_set_epoch:
            return False
        self.sync_state_set_epoch = sync_state_set_epoch
        return True

    def refresh_adopts(self, replica: ReplicaInfo | None, proposed_under: RoleChange) -> bool:
        """After a refused proposal: may the controller's `replica` info be adopted? Only when
        it still names this broker master of the epoch the proposal was made in."""
        return (replica is not None and self.serving_master
                and replica.master_epoch == proposed_under.master_epoch
                and replica.master_broker_id == proposed_under.broker_id)

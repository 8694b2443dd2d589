"""The master's quorum accounting, as a sans-IO mixin of MasterReplication: which acks count
for a put, when a put is done, and where the confirm position stands.

The SyncStateSet's membership (join, candidate, leave) is decided where the acks and ticks
arrive (ha/replication/master_core.py); this module counts what the members and the sets the
controller holds or may commit imply. Not usable on its own: its methods use MasterReplication's
state (settings, broker_id, `_members`, `_candidates`, `_accepted`, `_accepted_epoch`,
`_proposed`, `_lease_until_ms`, `_master_position`, `_confirm`, `_put_ends`, `_acked_high`) and
its `_ack_of`.

Quorum and confirm arithmetic: ha/replication/quorum.py; the confirm position is the minimum
over the master and the SSS members, for both master roles, brought down to the end of a put (each
`local_durable` position is one): a slave acks what it received, which may end inside a put,
and a confirm position inside a put would let readers see its first rows, which a new master
holding only those rows must then keep (MessageStore.complete_log_position_end) and the
producer's retry would store again. ASYNC_MASTER never makes a put wait (its reads still
stop at the confirm position, so a slave that may be elected later holds whatever was read).

Controller mode (`accepted_sync_state_set` given): the local SyncStateSet (its membership:
ha/replication/master_core.py) is only this master's proposal (`local_sync_state_set`, sent to
the controller by the shell); the controller elects from the set it accepted, so the two sets
play different parts until they agree:

    needAckNums                    from the accepted set's size (quorum.plan_put_controller): a
                                   master that lost its slaves cannot degrade on its own say-so
                                   (it may be deposed already: its acks would be cut later)
    acks that count for a put      local members that the controller accepted (intersection):
                                   an ack from a member the controller does not know yet could
                                   make a put PUT_OK that an election then loses
    confirm position               minimum over the master, the local members and the accepted
                                   members (union): any accepted member may be elected; one
                                   without a link holds the confirm position where it is until
                                   the controller accepts a set without it (RocketMQ keeps the
                                   old value too)

Proposals in flight (`proposing(members, sync_state_set_epoch)`, called by the shell before it
sends one): until the controller's set moves past the epoch a proposal carried, the controller
may still commit it (a reply lost, a request delayed, a Raft entry committed by the next
leader), and then elect any of its members. So the slaves of every proposal not yet overtaken
count like accepted members (RocketMQ's "synchronizing" union): in the in-sync size, in the
confirm position (one without a link holds it), and with allAckInSyncStateSet for every ack (one
without a link holds the put). Found by the cluster simulation (seeds 214, 235): a proposal
adding slaves was in flight when their links closed; the master, alone in its local and accepted
set, acked alone; the controller then accepted the proposal and elected one of those slaves,
which lacked the acks. A proposal is overtaken once the master adopts a set of a newer epoch;
`proposal_pending()` tells the shell to make that happen (re-propose the local set, which the
controller accepts as an epoch bump even when it equals the set it holds) when nothing else will.

Master lease (controller mode, docs/design.md §5.7): `lease_until_ms` is renewed by every controller
heartbeat reply that names this broker master of this epoch, to the heartbeat's *send* time plus
the lease (shorter than the controller's controllerHeartbeatTimeoutMs, which it waits after the
last heartbeat it received before it elects another master). While the lease holds, a put is
DONE under the rule above. Once it has lapsed (the process was paused, or the controller has not
answered for a while: this master may have been replaced without knowing), a put is DONE only
when every slave of the accepted set and of the local set holds it: whichever of them an
election picks took the put with it, since a slave stops following before it takes over. So a
resumed or cut-off master acknowledges nothing that a new master lacks, and a healthy replica
set with every slave linked keeps acking while no controller answers (docs/design.md §5.6). The
lease
is read at the moment a put is answered (`now_ms`), so a put planned before a pause and answered
after it is judged after it.
"""

from __future__ import annotations

import bisect
import enum

from ha.replication.master_effects import ConfirmTo, MasterEffect, MasterSettings
from ha.replication.quorum import (
    PutPlan,
    confirm_position,
    holders,
    plan_put,
    plan_put_controller,
)

__all__ = ["PUT_ENDS_MAX", "MasterQuorum", "PutProgress"]

PUT_ENDS_MAX = 1 << 20  # put ends remembered above the confirm position (module docstring)


class PutProgress(enum.Enum):
    DONE = "DONE"  # `need` replicas hold it
    WAITING = "WAITING"
    UNREACHABLE = "UNREACHABLE"  # fewer replicas can still ack than needed: SLAVE_NOT_AVAILABLE


class MasterQuorum:
    """Quorum and confirm methods of MasterReplication (not usable on its own)."""

    # The state these methods read and change. MasterReplication's __init__ sets it all; it is
    # declared here so that the quorum rules type-check on their own (mypy --strict on cores).
    settings: MasterSettings
    broker_id: int
    _members: set[int]  # SyncStateSet slaves, by broker id
    _candidates: set[int]  # caught-up slaves about to join: they bound the confirm position
    _master_position: int
    _confirm: int
    _put_ends: list[int]  # sorted ends of this term's puts above the confirm position
    _acked_high: int
    _accepted: frozenset[int] | None  # the controller's set (controller mode), master excluded
    _accepted_epoch: int
    _proposed: dict[int, set[frozenset[int]]]  # proposals in flight, by their epoch
    _lease_until_ms: int | None

    def _ack_of(self, broker_id: int) -> int | None:
        """The log position a linked slave has acked (MasterReplication's links know it)."""
        raise NotImplementedError

    # -- puts -------------------------------------------------------------------------------
    def plan_put(self, master_end: int) -> PutPlan:
        """needAckNums for a put about to be written, or why it is refused."""
        if self.settings.async_master:
            return PutPlan(1, 1)
        if self._accepted is not None:
            electable = self._accepted
            if not self.settings.quorum.all_ack_in_sync_state_set:
                # a proposal in flight may be committed: the in-sync size counts its slaves
                # (RocketMQ's union while synchronizing); with allAckInSyncStateSet they must
                # hold every put instead (`_held_by_joining`)
                electable = electable | self._in_flight()
            return plan_put_controller(self.settings.quorum, 1 + len(electable))
        return plan_put(self.settings.quorum, master_end, self._counted_acks())

    def local_durable(self, log_position: int) -> list[MasterEffect]:
        """The master itself holds everything below `log_position` (written or fsynced): the
        end of a put (a concurrent put's may come later than a higher one)."""
        if log_position > self._confirm:
            bisect.insort(self._put_ends, log_position)
            if len(self._put_ends) > PUT_ENDS_MAX:  # the confirm stops at the ends kept only
                del self._put_ends[0]
        if log_position <= self._master_position:
            return self._recompute_confirm() if log_position > self._confirm else []
        self._master_position = log_position
        return self._recompute_confirm()

    def renew_lease(self, until_ms: int) -> None:
        """The controller confirmed this master of its epoch: the lease holds until `until_ms`
        (never shortened: an older confirmation may be answered later than a newer one)."""
        assert self._lease_until_ms is not None, "no lease without a controller"
        self._lease_until_ms = max(self._lease_until_ms, until_ms)

    def lease_lapsed(self, now_ms: int) -> bool:
        return self._lease_until_ms is not None and now_ms >= self._lease_until_ms

    def put_progress(self, log_position: int, need: int, *, now_ms: int) -> PutProgress:
        """Is a put ending at `log_position` that needs `need` replicas done now?"""
        if self.lease_lapsed(now_ms):  # maybe replaced: only a put every slave holds is safe
            if self._held_by_every_slave(log_position):
                return self._done(log_position)
            return PutProgress.WAITING  # until a renewed lease, the acks, or the deadline
        acks = self._counted_acks()
        if not self.settings.async_master:
            # the need of the set in force now, not only of the set the put was planned under:
            # a member that joined meanwhile may be elected (cluster simulation: allAck seed 3;
            # auto-isr seed 165, a put planned alone with need 1 answered after a slave had
            # been accepted, and lost with the master)
            if self._accepted is not None:
                need = max(need, self.plan_put(self._master_position).need)
            elif self.settings.quorum.all_ack_in_sync_state_set:
                need = max(need, 1 + len(self._members))
        if holders(log_position, self._master_position, acks) >= need:
            if not self._held_by_joining(log_position):
                return PutProgress.WAITING  # a joining slave first (or it stops joining)
            if not self._held_by_proposals(log_position):
                return PutProgress.WAITING  # the need of a set the controller may commit
            return self._done(log_position)
        if 1 + len(acks) + len(self._in_flight()) < need:
            return PutProgress.UNREACHABLE  # (a slave in flight counts once it is accepted)
        return PutProgress.WAITING

    def _done(self, log_position: int) -> PutProgress:
        self._acked_high = max(self._acked_high, log_position)
        return PutProgress.DONE

    def _held_by_joining(self, log_position: int) -> bool:
        """Slaves on their way into the SyncStateSet (candidates; in controller mode local
        members the controller has not accepted yet, and slaves of proposals in flight) hold
        everything below `log_position`. A member may be elected, so every rule promises that
        a slave joins only holding all acked so far (`_acked_high`), and while it joins no put
        is acknowledged without it (RocketMQ counts the growing local set the same way).
        Found by the cluster simulation: with allAckInSyncStateSet (seeds 3, 15, 30, 66, 73 of
        the first fault model), a master alone in its set acked puts that a slave, joining at
        the confirm position it held back as a candidate, lacked; elected after the master
        died, it lost them. With inSyncReplicas=2 and enableAutoInSyncReplicas (`--quorum
        auto-isr`, seeds 3, ...): the same, through the degraded need of a master alone, and
        a put planned alone (need 1) answered after a slave had joined. A slave that never
        catches up is no candidate for long (haMaxTimeSlaveNotCatchup), so puts wait at most
        that long for it. ASYNC_MASTER never waits."""
        if self.settings.async_master:
            return True
        joining = set(self._candidates)
        if self._accepted is not None:
            joining |= (self._members | self._in_flight()) - self._accepted
        for broker_id in joining:
            ack = self._ack_of(broker_id)
            if ack is None or ack < log_position:  # None: a proposed slave without a link
                return False
        return True

    def _held_by_proposals(self, log_position: int) -> bool:
        """Every proposal not yet overtaken, which the controller may still commit and then
        elect from, holds the put under its own need, counting its own members only. A
        shrink's members are all in the accepted set, so the need of the accepted set alone
        did not cover it: found by the cluster simulation (`--quorum auto-isr --partial` seed
        3182): master b4 with the accepted set {b4, b6, b5} proposed {b4, b5}, then acked a
        put on b6's ack (need 2 of 3); the controller committed {b4, b5}, b4 crashed, and b5,
        elected, lacked the put. With allAckInSyncStateSet every slave of a proposal already
        holds every put (the accepted set's, or `_held_by_joining`)."""
        if self.settings.async_master or self._accepted is None or not self._proposed:
            return True
        for proposals in self._proposed.values():
            for slaves in proposals:
                acks = [ack for ack in map(self._ack_of, slaves) if ack is not None]
                need = plan_put_controller(self.settings.quorum, 1 + len(slaves)).need
                if holders(log_position, self._master_position, acks) < need:
                    return False
        return True

    def _held_by_every_slave(self, log_position: int) -> bool:
        """The master and every slave an election could pick (accepted or local members) hold
        everything below `log_position`."""
        if self._master_position < log_position:
            return False
        slaves = self._members | (self._accepted or frozenset()) | self._in_flight()
        acks = [self._ack_of(broker_id) for broker_id in slaves]
        return all(ack is not None and ack >= log_position for ack in acks)

    # -- confirm and SSS --------------------------------------------------------------------
    def _counted_acks(self) -> list[int]:
        """Acks of the members whose ack counts towards a put's quorum."""
        members = self._members if self._accepted is None else self._members & self._accepted
        acks = [self._ack_of(broker_id) for broker_id in members]
        assert None not in acks, members  # a member leaves the set when its link closes
        return acks  # type: ignore[return-value]

    def _recompute_confirm(self) -> list[MasterEffect]:
        bound = (self._members | self._candidates | (self._accepted or frozenset())
                 | self._in_flight())
        acks = [self._ack_of(broker_id) for broker_id in bound]
        if None in acks:
            return []  # an accepted member without a link: hold until the controller drops it
        confirm = confirm_position(self._master_position, acks, self._confirm)  # type: ignore[arg-type]
        ends = bisect.bisect_right(self._put_ends, confirm)
        if ends:  # the last put end at or below it (none: it stays where it is)
            confirm = self._put_ends[ends - 1]
            del self._put_ends[:ends]
        elif self._put_ends:
            confirm = self._confirm
        if confirm > self._confirm:
            self._confirm = confirm
            return [ConfirmTo(confirm)]
        return []

    @property
    def confirm_log_position(self) -> int:
        return self._confirm

    @property
    def sync_state_set(self) -> tuple[int, ...]:
        """The local SyncStateSet (in controller mode: the set to propose), master first."""
        return (self.broker_id, *sorted(self._members))

    @property
    def accepted_sync_state_set(self) -> tuple[int, ...] | None:
        """The set the controller accepted, master first (None: static roles)."""
        if self._accepted is None:
            return None
        return (self.broker_id, *sorted(self._accepted))

    def accept_sync_state_set(self, members: tuple[int, ...],
                              sync_state_set_epoch: int | None = None) -> list[MasterEffect]:
        """Controller mode: the controller now holds `members` as the SyncStateSet, at
        `sync_state_set_epoch` (None: the epoch after the one in use). Proposals made at an
        older epoch can no longer be committed: they stop counting."""
        assert self._accepted is not None, "static roles have no accepted set"
        epoch = self._accepted_epoch + 1 if sync_state_set_epoch is None else sync_state_set_epoch
        assert epoch > self._accepted_epoch, (epoch, self._accepted_epoch)
        self._accepted = frozenset(members) - {self.broker_id}
        self._accepted_epoch = epoch
        self._proposed = {e: m for e, m in self._proposed.items() if e >= epoch}
        return self._recompute_confirm()

    def proposing(self, members: tuple[int, ...], sync_state_set_epoch: int) -> None:
        """Controller mode: the shell is about to propose `members` under
        `sync_state_set_epoch` (call it before the request leaves): until a set of a newer epoch
        is accepted, the controller may commit it, so its slaves count (module docstring)."""
        assert self._accepted is not None, "static roles propose nothing"
        if sync_state_set_epoch < self._accepted_epoch:
            return  # overtaken already: the controller fences it
        slaves = frozenset(members) - {self.broker_id}
        self._proposed.setdefault(sync_state_set_epoch, set()).add(slaves)

    def proposal_pending(self) -> bool:
        """Does a proposal not yet overtaken name a slave outside the accepted set? Then the
        shell must propose (the local set, even when it equals the accepted one) until a newer
        set is accepted: else those slaves may hold back puts and the confirm position for
        good."""
        return bool(self._in_flight())

    def _in_flight(self) -> frozenset[int]:
        """Slaves of proposals not yet overtaken that the accepted set lacks."""
        if not self._proposed:
            return frozenset()
        slaves = frozenset().union(*(members for proposals in self._proposed.values()
                                     for members in proposals))
        return slaves - (self._accepted or frozenset())


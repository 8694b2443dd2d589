"""The broker's role core (ha/replication/role_core.py): controller replies in, role decisions out.

Goal: the decisions roles.py and controller_link.py used to make inline, as tables: which
change is newer (epoch ordering), which action a change means after the last one applied,
the take-over epoch check, the master lease arithmetic (send time + min(masterLeaseMs, 2/3
of the controller's timeout), never shortened within an epoch), when a SyncStateSet is
proposed and when the controller's set is adopted. Method: plain calls, no threads.
"""

from __future__ import annotations

import pytest

from controller.api import ROLE_MASTER, ROLE_SLAVE, ReplicaInfo, RoleChange
from ha.replication.role_core import RoleAction, RoleCore, newer


def change(role: str, epoch: int, sss: tuple[int, ...] = (1, 2), sss_epoch: int = 1,
           *, broker_id: int = 1, master: int | None = 1) -> RoleChange:
    address = None if master is None else f"host:{master}"
    return RoleChange("a", broker_id, role, epoch, master, address, sss, sss_epoch)


def core(*, runtime_roles: bool = True, lease_ms: int = 2000, started: bool = True
         ) -> RoleCore:
    """A role core; `started`: it already applied a role of epoch 1 (no master), so a later
    epoch was elected while this process ran (else a master role means REELECT)."""
    roles = RoleCore(broker_name="a", runtime_roles=runtime_roles, master_lease_ms=lease_ms)
    if started and runtime_roles:
        roles.applied(roles.plan(change("none", 1, master=None)))
    return roles


@pytest.mark.parametrize(("new", "old", "expected"), [
    (change("master", 2), change("slave", 1, master=2), True),  # newer epoch
    (change("slave", 1, master=2), change("master", 2), False),  # older epoch
    (change("master", 2, sss_epoch=3), change("master", 2, sss_epoch=2), True),
    (change("master", 2, sss_epoch=2), change("master", 2, sss_epoch=2), False),  # same
    (change("slave", 2, master=3), change("none", 2, master=None), True),  # a role learnt
    (change("none", 2, master=None), change("slave", 2, master=3), False),
])
def test_newer_orders_by_epoch_then_set_epoch_then_role(new: RoleChange, old: RoleChange,
                                                        expected: bool) -> None:
    assert newer(new, old) is expected
    assert newer(new, None)


def test_offer_passes_each_newer_change_once() -> None:
    roles = core()
    assert roles.offer(change("slave", 1, master=2))
    assert not roles.offer(change("slave", 1, master=2))  # the same again: nothing to do
    assert roles.offer(change("master", 2))
    assert not roles.offer(change("slave", 1, master=2))  # a stale reply arrives late


def test_plan_follows_the_last_change_applied() -> None:
    roles = core()
    take_over = roles.plan(change("master", 2, sss_epoch=1))
    assert take_over.action is RoleAction.TAKE_OVER
    assert roles.plan(change("master", 2, sss_epoch=2)).action is RoleAction.TAKE_OVER  # not yet
    roles.applied(take_over)
    assert roles.serving_master and roles.sync_state_set_epoch == 1
    assert roles.plan(change("master", 2, sss_epoch=2)).action is RoleAction.ADOPT
    assert roles.plan(change("master", 3)).action is RoleAction.TAKE_OVER  # a new term
    follow = roles.plan(change("slave", 3, master=2))
    assert follow.action is RoleAction.FOLLOW and "broker 2" in follow.reason
    roles.applied(follow)
    assert not roles.serving_master
    none = roles.plan(change("none", 4, master=None))
    assert none.action is RoleAction.NONE and "no master" in none.reason
    slave_without_address = RoleChange("a", 1, "slave", 4, 2, None, (2,), 1)
    assert roles.plan(slave_without_address).action is RoleAction.NONE


def test_a_failed_take_over_is_planned_again() -> None:
    roles = core()
    plan = roles.plan(change("master", 2))
    roles.leaving()  # the shell started, then failed: applied() never ran
    assert roles.plan(plan.change).action is RoleAction.TAKE_OVER


def test_a_restarted_broker_never_continues_a_term_it_may_have_served() -> None:
    """Cluster simulation seed 275: a master restarted within the controller's heartbeat
    timeout is still named master of its epoch; it lost an unsynced tail its slaves hold, so
    continuing that epoch would make replicas differ below confirm. It asks for a new one."""
    roles = core(started=False)
    reelect = roles.plan(change("master", 2, sss=(1, 2, 3), sss_epoch=5))
    assert reelect.action is RoleAction.REELECT and "epoch 2" in reelect.reason
    roles.applied(reelect)
    assert roles.abandoned_epoch == 2 and not roles.serving_master
    assert roles.proposal((1,), (1, 2, 3)) is None  # no master service: nothing to propose
    # a newer SyncStateSet of the same epoch changes nothing: still an epoch of before
    assert roles.plan(change("master", 2, sss_epoch=6)).action is RoleAction.REELECT
    take_over = roles.plan(change("master", 3, sss=(1,), sss_epoch=7))  # elected again
    assert take_over.action is RoleAction.TAKE_OVER
    roles.applied(take_over)
    assert roles.abandoned_epoch == 0 and roles.serving_master
    # a restarted slave named slave follows at once (nothing of its own to lose)
    assert core(started=False).plan(change("slave", 2, master=2)).action is RoleAction.FOLLOW


def test_single_broker_sets_only_fence() -> None:
    roles = core(runtime_roles=False)
    assert roles.plan(change("master", 1)).action is RoleAction.UNFENCE
    fence = roles.plan(change("none", 2, master=None))
    assert fence.action is RoleAction.FENCE and fence.reason


def test_take_over_refuses_an_epoch_older_than_the_local_file() -> None:
    assert RoleCore.check_take_over(None, 1) is None
    assert RoleCore.check_take_over(3, 3) is None
    assert RoleCore.check_take_over(3, 4) is None
    refusal = RoleCore.check_take_over(5, 4)
    assert refusal is not None and "epoch 5" in refusal


def test_lease_is_send_time_plus_the_shorter_bound_and_never_shortened() -> None:
    roles = core(lease_ms=2000)
    assert roles.confirm(change("slave", 1, master=2), 100, 3000) is None  # not a master
    assert roles.lease_until_ms(1) == 0
    assert roles.confirm(change("master", 1), 1000, 3000) == 1000 + 2000  # 2/3 of 3 s = 2 s
    assert roles.confirm(change("master", 1), 1000, 1500) == 1000 + 1000  # 2/3 of 1.5 s
    assert roles.lease_until_ms(1) == 3000  # an older, longer confirmation stays
    assert roles.confirm(change("master", 1), 1200, 0) == 3200  # 0: controller says nothing
    assert roles.lease_until_ms(1) == 3200
    assert roles.lease_until_ms(2) == 0  # another epoch: no lease yet
    roles.confirm(change("master", 2), 500, 3000)  # a newer epoch wins even if earlier
    assert roles.lease_until_ms(2) == 2500 and roles.lease_until_ms(1) == 0


def test_sync_state_set_proposals_and_adoption() -> None:
    roles = core()
    assert roles.proposal((1, 2), (1,)) is None  # not serving yet
    roles.applied(roles.plan(change("master", 2, sss=(1,), sss_epoch=4)))
    assert roles.proposal((1,), (1,)) is None  # nothing differs
    fence = roles.proposal((1,), (1,), pending=True)  # a proposal in flight: fence it
    assert fence is not None and (fence.sync_state_set, fence.sync_state_set_epoch) == ((1,), 4)
    request = roles.proposal((1, 2), (1,))
    assert request is not None
    assert (request.master_broker_id, request.master_epoch, request.sync_state_set,
            request.sync_state_set_epoch) == (1, 2, (1, 2), 4)
    assert roles.proposal((1, 2), None) is None  # static roles: nothing to propose
    assert not roles.adopt((1, 2), 4)  # not newer than the set in use
    assert roles.adopt((1, 2), 5) and roles.sync_state_set_epoch == 5
    info = ReplicaInfo("c", "a", 1, "host:1", 2, (1, 2, 3), 6, ())
    assert roles.refresh_adopts(info, roles.current)  # type: ignore[arg-type]
    other_term = ReplicaInfo("c", "a", 3, "host:3", 3, (3,), 7, ())
    assert not roles.refresh_adopts(other_term, roles.current)  # type: ignore[arg-type]
    assert not roles.refresh_adopts(None, roles.current)  # type: ignore[arg-type]


def test_a_master_reports_its_lease_lapsed_only_past_its_end() -> None:
    """The heartbeat's master_lease_lapsed (an operator's election waits for it)."""
    roles = core(lease_ms=2000)
    assert not roles.master_lease_lapsed(now_ms=10_000)  # no master role applied
    master = change(ROLE_MASTER, 2)
    roles.applied(roles.plan(master))
    assert roles.master_lease_lapsed(now_ms=0)  # never confirmed: no lease
    roles.confirm(master, sent_ms=1000, controller_timeout_ms=3000)  # until 3000
    assert not roles.master_lease_lapsed(now_ms=2999)
    assert roles.master_lease_lapsed(now_ms=3000)
    slave = change(ROLE_SLAVE, 3)
    roles.applied(roles.plan(slave))
    assert not roles.master_lease_lapsed(now_ms=10_000)  # a slave has no lease to lapse

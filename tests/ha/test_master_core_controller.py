"""Master core in controller mode: the local SyncStateSet is a proposal, the accepted one rules.

Goal: an ack counts for a put only from a member the controller accepted (so an election from
the accepted set cannot lose a PUT_OK), and the confirm position is bounded by every accepted
member too, held where it is while an accepted member has no link. Method: MasterReplication
driven by explicit events, as in test_master_core.py, with `accepted_sync_state_set` given.
"""

from __future__ import annotations

from ha.frames import Ack
from ha.master_core import ConfirmTo, MasterReplication, PutProgress, SyncStateSetChanged
from storage_engine import EpochEntry as E

from tests.ha.test_master_core import connect, log, master

EPOCHS = (E(3, 0),)


def controller_master(accepted: tuple[int, ...], total: int = 3, in_sync: int = 2
                      ) -> MasterReplication:
    plain = master(total=total, in_sync=in_sync)
    return MasterReplication(plain.settings, broker_id=0, master_epoch=3, endpoint="h:1",
                             master_log_position=0, confirm_log_position=0, now_ms=0,
                             accepted_sync_state_set=accepted)


def test_a_member_counts_for_puts_only_once_the_controller_accepts_it() -> None:
    core = controller_master(accepted=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    assert core.local_durable(2500) == [ConfirmTo(2500)]  # the accepted set is the master alone
    assert connect(core, 1, 1, 2500, snapshot) == [SyncStateSetChanged((0, 1))]
    assert core.sync_state_set == (0, 1) and core.accepted_sync_state_set == (0,)
    # Locally in sync, but the controller does not know: the put may not count its ack.
    assert core.plan_put(2500).refused
    core.local_durable(2600)
    assert core.put_progress(2600, 2) is PutProgress.UNREACHABLE
    assert core.accept_sync_state_set((0, 1)) == []
    plan = core.plan_put(2600)
    assert (plan.need, plan.refused) == (2, "")
    assert core.put_progress(2600, 2) is PutProgress.WAITING
    core.next_send(1, log(2600, epochs=EPOCHS), now_ms=1)
    assert core.on_frame(1, Ack(2600), log(2600, epochs=EPOCHS), now_ms=1) == [ConfirmTo(2600)]
    assert core.put_progress(2600, 2) is PutProgress.DONE


def test_confirm_holds_while_an_accepted_member_has_no_link() -> None:
    core = controller_master(accepted=(0, 1, 2))
    snapshot = log(2500, epochs=EPOCHS)
    assert core.local_durable(2500) == []  # slaves 1 and 2 may be elected: hold at 0
    connect(core, 1, 1, 2500, snapshot)
    assert core.confirm_log_position == 0  # slave 2 still unknown
    assert connect(core, 2, 2, 2400, snapshot) == [SyncStateSetChanged((0, 1, 2)),
                                                   ConfirmTo(2400)]
    core.next_send(2, snapshot, now_ms=1)
    assert core.on_frame(2, Ack(2500), snapshot, now_ms=1) == [ConfirmTo(2500)]


def test_a_shrink_takes_effect_for_the_confirm_position_once_accepted() -> None:
    core = controller_master(accepted=(0, 1, 2))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    connect(core, 2, 2, 2500, snapshot)
    assert core.confirm_log_position == 2500
    assert core.link_closed(2, now_ms=5) == [SyncStateSetChanged((0, 1))]
    core.local_durable(3000)
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=6)
    # Slave 1 holds 3000 and its ack counts (it is accepted), so the put is done...
    assert core.on_frame(1, Ack(3000), grown, now_ms=7) == []
    assert core.put_progress(3000, 2) is PutProgress.DONE
    # ...but readers wait: slave 2 is still in the accepted set and may be elected.
    assert core.confirm_log_position == 2500
    assert core.accept_sync_state_set((0, 1)) == [ConfirmTo(3000)]


def test_a_master_that_lost_its_slaves_degrades_only_once_the_controller_agrees() -> None:
    # A master cut off from its slaves may already be deposed (SIGSTOP, then SIGCONT): until
    # the controller accepts a smaller set it must not ack alone, or the new master's
    # handshake would later cut what it acked.
    plain = master(total=3, in_sync=2, auto=True)
    core = MasterReplication(plain.settings, broker_id=0, master_epoch=3, endpoint="h:1",
                             master_log_position=0, confirm_log_position=0, now_ms=0,
                             accepted_sync_state_set=(0, 1, 2))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    connect(core, 2, 2, 2500, snapshot)
    core.link_closed(1, now_ms=5)
    core.link_closed(2, now_ms=5)
    assert core.sync_state_set == (0,)  # the local view: alone
    plan = core.plan_put(2500)
    assert (plan.need, plan.refused) == (2, "")  # the controller's view: 3 members
    core.local_durable(2600)
    assert core.put_progress(2600, plan.need) is PutProgress.UNREACHABLE  # SLAVE_NOT_AVAILABLE
    core.accept_sync_state_set((0,))
    plan = core.plan_put(2600)
    assert plan.need == 1
    assert core.put_progress(2600, plan.need) is PutProgress.DONE

"""Master core in controller mode: the local SyncStateSet is a proposal, the accepted one rules.

Goal: an ack counts for a put only from a member the controller accepted (so an election from
the accepted set cannot lose a PUT_OK), and the confirm position is bounded by every accepted
member too, held where it is while an accepted member has no link. Method: MasterReplication
driven by explicit events, as in test_master_core.py, with `accepted_sync_state_set` given.
"""

from __future__ import annotations

import dataclasses

from ha.replication.frames import Ack
from ha.replication.master_core import (
    ConfirmTo,
    MasterReplication,
    PutProgress,
    SendLog,
    SyncStateSetChanged,
)
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
    assert core.put_progress(2600, 2, now_ms=0) is PutProgress.UNREACHABLE
    assert core.accept_sync_state_set((0, 1)) == []
    plan = core.plan_put(2600)
    assert (plan.need, plan.refused) == (2, "")
    assert core.put_progress(2600, 2, now_ms=0) is PutProgress.WAITING
    core.next_send(1, log(2600, epochs=EPOCHS), now_ms=1)
    assert core.on_frame(1, Ack(2600), log(2600, epochs=EPOCHS), now_ms=1) == [ConfirmTo(2600)]
    assert core.put_progress(2600, 2, now_ms=0) is PutProgress.DONE


def test_confirm_holds_while_an_accepted_member_has_no_link() -> None:
    core = controller_master(accepted=(0, 1, 2))
    snapshot = log(2500, epochs=EPOCHS)
    assert core.local_durable(2500) == []  # slaves 1 and 2 may be elected: hold at 0
    connect(core, 1, 1, 2500, snapshot)
    assert core.confirm_log_position == 0  # slave 2 still unknown
    # slave 2 holds 2400, inside the put that ends at 2500: the confirm stops at put ends
    assert connect(core, 2, 2, 2400, snapshot) == [SyncStateSetChanged((0, 1, 2))]
    core.next_send(2, snapshot, now_ms=1)
    assert core.on_frame(2, Ack(2500), snapshot, now_ms=1) == [ConfirmTo(2500)]


def test_the_confirm_position_stops_at_put_ends() -> None:
    # A slave acks what it received, which may end inside a put; readers never see a put's
    # first rows before its last (tests/ha/test_partial_put.py: a new master would have to
    # keep them, and the producer's retry would store them twice).
    core = controller_master(accepted=(0, 1))
    snapshot = log(3000, epochs=EPOCHS)
    connect(core, 1, 1, 0, snapshot)
    core.local_durable(1000)
    core.local_durable(3000)
    core.local_durable(2000)  # a concurrent put's end may come after a higher one
    confirms = []
    for now_ms, ack in enumerate((1500, 2999, 3000), start=1):
        while isinstance(core.next_send(1, snapshot, now_ms=now_ms), SendLog):
            pass
        confirms += [effect for effect in core.on_frame(1, Ack(ack), snapshot, now_ms=now_ms)
                     if isinstance(effect, ConfirmTo)]
    assert confirms == [ConfirmTo(1000), ConfirmTo(2000), ConfirmTo(3000)]


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
    assert core.put_progress(3000, 2, now_ms=0) is PutProgress.DONE
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
    # SLAVE_NOT_AVAILABLE
    assert core.put_progress(2600, plan.need, now_ms=0) is PutProgress.UNREACHABLE
    core.accept_sync_state_set((0,))
    plan = core.plan_put(2600)
    assert plan.need == 1
    assert core.put_progress(2600, plan.need, now_ms=0) is PutProgress.DONE


# -- the master lease (issue 15: a master paused past its replacement acked puts after SIGCONT) --
def leased_master(accepted: tuple[int, ...], lease_until_ms: int, *, in_sync: int,
                  auto: bool = False) -> MasterReplication:
    plain = master(total=3, in_sync=in_sync, auto=auto)
    return MasterReplication(plain.settings, broker_id=0, master_epoch=3, endpoint="h:1",
                             master_log_position=0, confirm_log_position=0, now_ms=0,
                             accepted_sync_state_set=accepted, lease_until_ms=lease_until_ms)


def test_a_master_resumed_past_its_lease_acks_nothing_its_slaves_lack() -> None:
    # The interleaving of the fault run, replayed: inSyncReplicas=1 (need 1), slaves 1 and 2
    # accepted and linked; a put is written at t=900 and the process is stopped until t=7000,
    # long past its lease (confirmed until t=1000). Meanwhile the controller elected slave 1,
    # which stopped following: the links close right after SIGCONT, and the put is judged then.
    core = leased_master((0, 1, 2), lease_until_ms=1000, in_sync=1)
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    connect(core, 2, 2, 2500, snapshot)
    plan = core.plan_put(2500)
    assert (plan.need, plan.refused) == (1, "")
    core.local_durable(2600)
    assert core.put_progress(2600, plan.need, now_ms=900) is PutProgress.DONE  # leased: the rule
    core.local_durable(2700)  # the put in flight at SIGSTOP
    assert core.lease_lapsed(7000)
    assert core.put_progress(2700, plan.need, now_ms=7000) is PutProgress.WAITING
    core.link_closed(1, now_ms=7001)
    core.link_closed(2, now_ms=7001)
    for now_ms in (7001, 7002, 9000):  # and every put planned after SIGCONT alike
        assert core.put_progress(2700, plan.need, now_ms=now_ms) is PutProgress.WAITING
        assert core.put_progress(2700, core.plan_put(2700).need, now_ms=now_ms) \
            is PutProgress.WAITING
    # Only a renewal from the controller (it names this broker master of epoch 3 again in a
    # reply to a heartbeat sent after the pause) restores the quorum rule.
    core.renew_lease(9500)
    assert core.put_progress(2700, plan.need, now_ms=9001) is PutProgress.DONE


def test_after_the_lease_a_put_every_slave_holds_is_done_so_writes_go_on_without_controller(
        ) -> None:
    core = leased_master((0, 1, 2), lease_until_ms=1000, in_sync=2)
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    connect(core, 2, 2, 2500, snapshot)
    core.local_durable(3000)
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=5000)
    core.next_send(2, grown, now_ms=5000)
    core.on_frame(1, Ack(3000), grown, now_ms=5001)
    # Two replicas hold it (the rule's need), but the lease lapsed: slave 2 may have been elected.
    assert core.put_progress(3000, 2, now_ms=5001) is PutProgress.WAITING
    core.on_frame(2, Ack(3000), grown, now_ms=5002)
    assert core.put_progress(3000, 2, now_ms=5002) is PutProgress.DONE  # every slave holds it


def test_a_slave_in_the_local_set_only_must_hold_the_put_too_once_the_lease_lapsed() -> None:
    # The controller may have accepted a growth whose reply never came back: slave 2 is in the
    # local set but not (yet) in the accepted one, and may be elected from the controller's set.
    core = leased_master((0, 1), lease_until_ms=1000, in_sync=2)
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    connect(core, 2, 2, 2500, snapshot)
    assert core.sync_state_set == (0, 1, 2) and core.accepted_sync_state_set == (0, 1)
    core.local_durable(3000)
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=2000)
    core.next_send(2, grown, now_ms=2000)
    core.on_frame(1, Ack(3000), grown, now_ms=2001)
    assert core.put_progress(3000, 2, now_ms=2001) is PutProgress.WAITING
    # within the lease too, under every rule: a slave joining the set holds every acked put
    assert core.put_progress(3000, 2, now_ms=999) is PutProgress.WAITING
    core.on_frame(2, Ack(3000), grown, now_ms=2002)
    assert core.put_progress(3000, 2, now_ms=2002) is PutProgress.DONE


def test_a_renewal_never_shortens_the_lease() -> None:
    core = leased_master((0,), lease_until_ms=5000, in_sync=1)
    core.renew_lease(3000)  # an older heartbeat's reply, answered late
    assert not core.lease_lapsed(4999) and core.lease_lapsed(5000)
    assert core.stats().lease_until_ms == 5000


def all_ack_master(accepted: tuple[int, ...]) -> MasterReplication:
    plain = master(total=3, in_sync=3)
    settings = dataclasses.replace(plain.settings, quorum=dataclasses.replace(
        plain.settings.quorum, all_ack_in_sync_state_set=True))
    return MasterReplication(settings, broker_id=0, master_epoch=3, endpoint="h:1",
                             master_log_position=0, confirm_log_position=0, now_ms=0,
                             accepted_sync_state_set=accepted)


def test_all_ack_a_joining_slave_holds_every_put_acknowledged_after_it_joins() -> None:
    # Regression (tests/sim/cluster_sim.py seeds 3, 15, 30, 66, 73): a master alone in its
    # set acked puts past the confirm position a catching-up slave held back; the slave joined
    # at that confirm position, the controller accepted it, the master died, the slave was
    # elected without those PUT_OKs. allAckInSyncStateSet promises every member holds them.
    core = all_ack_master(accepted=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    assert core.put_progress(2500, 1, now_ms=0) is PutProgress.DONE  # alone: need 1
    connect(core, 1, 1, 2000, snapshot)  # 500 behind (< one batch): a candidate
    assert core.sync_state_set == (0,)
    core.local_durable(3000)
    # The candidate may join (and be elected) soon: the put waits for it.
    assert core.put_progress(3000, 1, now_ms=0) is PutProgress.WAITING
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=1)
    # the confirm stays at 2500 (the end of a put: 2600 is inside the one ending at 3000)
    assert core.on_frame(1, Ack(2600), grown, now_ms=1) == [SyncStateSetChanged((0, 1))]
    assert core.accepted_sync_state_set == (0,)  # proposed, not accepted yet
    assert core.put_progress(3000, 1, now_ms=1) is PutProgress.WAITING  # joining: needs it
    core.on_frame(1, Ack(3000), grown, now_ms=2)
    assert core.put_progress(3000, 1, now_ms=2) is PutProgress.DONE


def test_auto_isr_a_slave_joins_only_holding_what_the_master_acked_alone() -> None:
    # Regression (tests/sim/cluster_sim.py --quorum auto-isr, seed 3): inSyncReplicas=2 with
    # enableAutoInSyncReplicas; the master, alone in its set, acked with need 1 past the confirm
    # position a catching-up slave held back; the slave joined at that confirm position, was
    # accepted, the master died and the slave was elected without those PUT_OKs. Every rule now
    # waits for a slave on its way in, and a slave joins only holding every acked put.
    core = controller_master(accepted=(0,), in_sync=2)
    core = MasterReplication(dataclasses.replace(core.settings, quorum=dataclasses.replace(
        core.settings.quorum, auto_in_sync_replicas=True)), broker_id=0, master_epoch=3,
        endpoint="h:1", master_log_position=0, confirm_log_position=0, now_ms=0,
        accepted_sync_state_set=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    assert core.plan_put(2500).need == 1  # degraded: alone in the accepted set
    assert core.put_progress(2500, 1, now_ms=0) is PutProgress.DONE
    connect(core, 1, 1, 2000, snapshot)  # 500 behind (< one batch): a candidate
    core.local_durable(3000)
    assert core.put_progress(3000, 1, now_ms=0) is PutProgress.WAITING  # the candidate first
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=1)
    core.on_frame(1, Ack(2500), grown, now_ms=1)
    assert core.sync_state_set == (0, 1)  # joined holding 2500, all that was acked
    assert core.put_progress(3000, 1, now_ms=1) is PutProgress.WAITING  # joining: needs it
    core.on_frame(1, Ack(3000), grown, now_ms=2)
    assert core.put_progress(3000, 1, now_ms=2) is PutProgress.DONE


def test_a_slave_never_joins_lacking_an_acked_put() -> None:
    core = controller_master(accepted=(0,), in_sync=1)
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    assert core.put_progress(2500, 1, now_ms=0) is PutProgress.DONE  # acked on the master alone
    connect(core, 1, 1, 1000, snapshot)  # far behind: no candidate yet
    assert core.sync_state_set == (0,)
    core.next_send(1, snapshot, now_ms=1)
    core.on_frame(1, Ack(2000), snapshot, now_ms=1)
    assert core.sync_state_set == (0,)  # 2000 < 2500 acked: not yet
    core.next_send(1, snapshot, now_ms=2)
    core.on_frame(1, Ack(2500), snapshot, now_ms=2)
    assert core.sync_state_set == (0, 1)


def test_all_ack_a_put_planned_before_the_set_grew_waits_for_the_new_member() -> None:
    # Regression (tests/sim/cluster_sim.py seed 3): a put planned while the master was alone
    # (need 1) was answered PUT_OK after the controller had accepted a slave that lacked it;
    # the master died and that slave was elected.
    core = all_ack_master(accepted=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    need = core.plan_put(2500).need
    assert need == 1
    connect(core, 1, 1, 2500, snapshot)
    assert core.sync_state_set == (0, 1)
    core.accept_sync_state_set((0, 1))
    core.local_durable(3000)  # the put planned above, now durable on the master
    assert core.put_progress(3000, need, now_ms=0) is PutProgress.WAITING
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=1)
    core.on_frame(1, Ack(3000), grown, now_ms=1)
    assert core.put_progress(3000, need, now_ms=1) is PutProgress.DONE


def test_all_ack_a_proposal_in_flight_holds_puts_after_its_new_member_leaves() -> None:
    # Regression (tests/sim/cluster_sim.py seeds 214, 235, and the seeds found with this rule
    # switched off; see test_cluster_sim.py): the master proposed (0, 1); slave 1's link closed
    # before the answer; alone again in its local and accepted set, the master acked alone; the
    # controller then committed the proposal, the master died, slave 1 was elected without
    # those PUT_OKs. While the proposal may still be committed, slave 1 must hold every put.
    core = all_ack_master(accepted=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    assert connect(core, 1, 1, 2500, snapshot) == [SyncStateSetChanged((0, 1))]
    assert not core.proposal_pending()
    core.proposing((0, 1), 0)
    assert core.proposal_pending()  # until a newer set is accepted
    assert core.link_closed(1, now_ms=5) == [SyncStateSetChanged((0,))]
    assert core.sync_state_set == (0,) and core.accepted_sync_state_set == (0,)
    assert core.proposal_pending()  # the shell proposes (0,) again: a fence
    core.local_durable(3000)
    assert core.confirm_log_position == 2500  # slave 1 may be elected: hold
    assert core.put_progress(3000, core.plan_put(3000).need, now_ms=6) is PutProgress.WAITING
    # the controller answers with a newer epoch: (0,) (the fence) or (0, 1) (the proposal)
    assert core.accept_sync_state_set((0,), 1) == [ConfirmTo(3000)]
    assert not core.proposal_pending()
    assert core.put_progress(3000, 1, now_ms=7) is PutProgress.DONE


def test_all_ack_a_committed_proposal_without_its_member_acks_nothing() -> None:
    core = all_ack_master(accepted=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    core.proposing((0, 1), 0)
    core.link_closed(1, now_ms=5)
    core.local_durable(3000)
    assert core.put_progress(3000, 1, now_ms=6) is PutProgress.WAITING
    assert core.accept_sync_state_set((0, 1), 1) == []  # committed: slave 1 may be elected
    assert core.put_progress(3000, 1, now_ms=7) is PutProgress.UNREACHABLE
    assert core.confirm_log_position == 2500


def test_an_overtaken_proposal_no_longer_counts() -> None:
    core = all_ack_master(accepted=(0,))
    core.accept_sync_state_set((0,), 4)
    core.proposing((0, 1, 2), 3)  # made under epoch 3, answered after epoch 4 was adopted
    assert not core.proposal_pending()
    core.local_durable(100)
    assert core.put_progress(100, 1, now_ms=0) is PutProgress.DONE


def test_numeric_quorum_counts_a_proposal_in_flight_in_the_in_sync_size() -> None:
    core = controller_master(accepted=(0,), in_sync=2)
    assert core.plan_put(0).refused  # alone in the accepted set, 2 needed
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    core.proposing((0, 1), 0)
    plan = core.plan_put(2500)
    assert (plan.need, plan.in_sync, plan.refused) == (2, 2, "")
    core.local_durable(2600)
    # its ack cannot count before the controller accepts it, but the put may wait for that
    assert core.put_progress(2600, 2, now_ms=0) is PutProgress.WAITING


def test_auto_isr_a_put_planned_alone_needs_the_member_accepted_meanwhile() -> None:
    # Regression (tests/sim/cluster_sim.py --quorum auto-isr, seed 165): a put planned while
    # the master was alone in its accepted set (degraded need 1) was answered PUT_OK after the
    # controller had accepted a slave that lacked it; the master was cut off, that slave was
    # elected and lost it. The need of the set in force when the put is answered applies.
    plain = controller_master(accepted=(0,), in_sync=2)
    core = MasterReplication(dataclasses.replace(plain.settings, quorum=dataclasses.replace(
        plain.settings.quorum, auto_in_sync_replicas=True)), broker_id=0, master_epoch=3,
        endpoint="h:1", master_log_position=0, confirm_log_position=0, now_ms=0,
        accepted_sync_state_set=(0,))
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)  # joins at once: it holds everything acked
    need = core.plan_put(2500).need
    assert need == 1  # the accepted set is still the master alone
    core.accept_sync_state_set((0, 1), 1)
    core.local_durable(3000)  # the put planned above
    assert core.put_progress(3000, need, now_ms=0) is PutProgress.WAITING
    grown = log(3000, epochs=EPOCHS)
    core.next_send(1, grown, now_ms=1)
    core.on_frame(1, Ack(3000), grown, now_ms=1)
    assert core.put_progress(3000, need, now_ms=1) is PutProgress.DONE


def test_a_shrink_in_flight_holds_a_put_its_own_members_lack() -> None:
    # Regression (tests/sim/cluster_sim.py --quorum auto-isr --partial, seed 3182): with the
    # accepted set {0, 1, 2} the master proposed {0, 2} (dropping 1), then acked a put on
    # slave 1's ack alone (need 2 of 3); the controller committed {0, 2}, the master crashed,
    # and slave 2, elected, lacked it. A proposal the controller may commit must hold the put
    # under its own need, counting its own members.
    core = controller_master(accepted=(0, 1, 2), in_sync=2)
    snapshot = log(2500, epochs=EPOCHS)
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot)
    connect(core, 2, 2, 2500, snapshot)
    core.proposing((0, 2), 5)
    core.local_durable(2600)
    later = log(2600, epochs=EPOCHS)
    core.next_send(1, later, now_ms=1)
    core.on_frame(1, Ack(2600), later, now_ms=1)  # slave 1 holds it, slave 2 not yet
    assert core.put_progress(2600, 2, now_ms=1) is PutProgress.WAITING
    core.next_send(2, later, now_ms=2)
    core.on_frame(2, Ack(2600), later, now_ms=2)
    assert core.put_progress(2600, 2, now_ms=2) is PutProgress.DONE

"""Master core: handshake, batch cutting, heartbeats, SyncStateSet join/leave, quorum progress.

Method: a MasterReplication driven by explicit events and `now_ms` (no sockets, no clock). The
log is described by MasterLog snapshots; every effect is checked.
"""

from __future__ import annotations

from ha.replication.frames import Ack, MasterHello, Refuse, SlaveHello, Transfer
from ha.replication.master_core import (
    SHIP_FROM_PUT_BYTES_MAX,
    CloseLink,
    ConfirmTo,
    MasterLog,
    MasterReplication,
    MasterSettings,
    PutProgress,
    SendFrame,
    SendLog,
    SendMetadata,
    SyncStateSetChanged,
    Wait,
)
from ha.replication.quorum import QuorumSettings
from storage_engine import EpochEntry as E

SEG = 10_000


def master(total: int = 2, in_sync: int = 2, min_in_sync: int = 1, auto: bool = False,
           batch: int = 1000, async_master: bool = False, confirm: int = 0,
           position: int = 0) -> MasterReplication:
    settings = MasterSettings(
        quorum=QuorumSettings(total_replicas=total, in_sync_replicas=in_sync,
                              min_in_sync_replicas=min_in_sync, auto_in_sync_replicas=auto),
        async_master=async_master, transfer_batch_bytes=batch, heartbeat_interval_ms=100,
        housekeeping_interval_ms=1000, slave_not_catchup_max_ms=500,
        metadata_sync_interval_ms=50, segment_size_bytes=SEG)
    return MasterReplication(settings, broker_id=0, master_epoch=3, endpoint="h:1",
                             master_log_position=position, confirm_log_position=confirm,
                             now_ms=0)


def log(end: int, epochs: tuple[E, ...] = (E(1, 0), E(3, 2500)), min_: int = 0,
        version: int = 0) -> MasterLog:
    return MasterLog(min_, end, epochs, version)


def connect(core: MasterReplication, link_id: int, broker_id: int, start: int, snapshot: MasterLog,
            now_ms: int = 0) -> list[object]:
    core.link_opened(link_id, now_ms=now_ms)
    *_, reply = core.on_frame(link_id, SlaveHello(broker_id, start, 0, 0, SEG, ()), snapshot,
                              now_ms=now_ms)
    assert isinstance(reply, SendFrame) and isinstance(reply.frame, MasterHello)
    assert reply.frame.max_log_position == snapshot.log_position_end
    return core.on_frame(link_id, Ack(start), snapshot, now_ms=now_ms)


def test_batches_stop_at_batch_size_epoch_and_segment_boundaries() -> None:
    core = master(batch=1000)
    snapshot = log(12_000, epochs=(E(1, 0), E(3, 2500)))
    connect(core, 1, 1, 1800, snapshot)
    cuts = []
    for _ in range(20):
        effect = core.next_send(1, snapshot, now_ms=1)
        if not isinstance(effect, SendLog):
            break
        cuts.append((effect.transfer.log_position, effect.size_bytes, effect.transfer.data_epoch,
                     effect.transfer.data_epoch_start))
    assert cuts == [
        (1800, 700, 1, 0),  # epoch 1 ends at 2500
        (2500, 1000, 3, 2500), (3500, 1000, 3, 2500), (4500, 1000, 3, 2500),
        (5500, 1000, 3, 2500), (6500, 1000, 3, 2500), (7500, 1000, 3, 2500),
        (8500, 1000, 3, 2500), (9500, 500, 3, 2500),  # segment ends at 10000
        (10_000, 1000, 3, 2500), (11_000, 1000, 3, 2500),
    ]


def test_quorum_join_ack_confirm_and_heartbeat() -> None:
    core = master(total=2, in_sync=2)
    snapshot = log(3000)
    effects = connect(core, 1, 1, 0, snapshot)
    # ack 0 >= confirm 0 and the epoch starts at 2500 > 0: not yet a member.
    assert effects == [] and core.sync_state_set == (0,)
    assert core.plan_put(3000).refused  # 1 in sync, 2 needed
    send = core.next_send(1, snapshot, now_ms=1)
    assert isinstance(send, SendLog) and send.size_bytes == 1000
    core.next_send(1, snapshot, now_ms=1)
    core.next_send(1, snapshot, now_ms=1)  # 2000..2500 then 2500..3000 next
    core.next_send(1, snapshot, now_ms=1)
    effects = core.on_frame(1, Ack(3000), snapshot, now_ms=2)
    assert effects == [SyncStateSetChanged((0, 1))]  # confirm needs the master's own position
    assert core.local_durable(3000) == [ConfirmTo(3000)]
    plan = core.plan_put(3000)
    assert plan.need == 2 and not plan.refused
    # A put at 3500: master holds it, the slave not yet.
    core.local_durable(3500)
    assert core.put_progress(3500, 2, now_ms=0) is PutProgress.WAITING
    snapshot = log(3500)
    send = core.next_send(1, snapshot, now_ms=3)
    assert isinstance(send, SendLog) and send.transfer.confirm_log_position == 3000
    assert core.on_frame(1, Ack(3500), snapshot, now_ms=4) == [ConfirmTo(3500)]
    assert core.put_progress(3500, 2, now_ms=0) is PutProgress.DONE
    # Nothing left: the confirm move is pushed 5 ms after the last send (data would have carried
    # it), then heartbeats every 100 ms.
    assert core.next_send(1, snapshot, now_ms=5) == Wait(3)
    beat = core.next_send(1, snapshot, now_ms=8)
    assert isinstance(beat, SendFrame) and beat.frame == Transfer(3, 3, 2500, 3500, 3500)
    assert core.next_send(1, snapshot, now_ms=50) == Wait(58)
    assert isinstance(core.next_send(1, snapshot, now_ms=108), SendFrame)


def test_link_drop_degrades_or_refuses() -> None:
    for auto, expected_need, refused in ((False, 2, True), (True, 1, False)):
        core = master(total=2, in_sync=2, auto=auto)
        snapshot = log(2500, epochs=(E(3, 0),))
        core.local_durable(2500)
        connect(core, 1, 1, 2500, snapshot)
        assert core.sync_state_set == (0, 1)
        core.local_durable(2600)
        assert core.put_progress(2600, 2, now_ms=0) is PutProgress.WAITING
        assert core.link_closed(1, now_ms=10) == [SyncStateSetChanged((0,))]
        # The waiting put cannot be acked by two replicas any more: SLAVE_NOT_AVAILABLE.
        assert core.put_progress(2600, 2, now_ms=0) is PutProgress.UNREACHABLE
        plan = core.plan_put(2600)
        assert (plan.need, bool(plan.refused)) == (expected_need, refused)


def test_sss_shrinks_when_not_caught_up_and_silent_links_close() -> None:
    core = master(total=3, in_sync=2)
    snapshot = log(2500, epochs=(E(3, 0),))
    connect(core, 1, 1, 2500, snapshot, now_ms=0)
    connect(core, 2, 2, 2500, snapshot, now_ms=0)
    assert core.sync_state_set == (0, 1, 2)
    grown = log(9000, epochs=(E(3, 0),))
    core.next_send(1, grown, now_ms=10)
    core.on_frame(1, Ack(3500), grown, now_ms=20)  # slave 1 acks but stays behind
    core.next_send(2, grown, now_ms=10)
    core.on_frame(2, Ack(3500), grown, now_ms=400)
    effects = core.on_tick(grown, now_ms=600)  # both behind for > 500 ms since they joined
    assert effects == [SyncStateSetChanged((0, 2)), SyncStateSetChanged((0,))]
    effects = core.on_tick(grown, now_ms=1300)  # slave 1 silent since 20 ms: > 1000 ms
    assert [type(e) for e in effects] == [CloseLink] and effects[0].link_id == 1
    assert "silent" in effects[0].reason


def test_async_master_never_waits_and_confirm_follows_in_sync_members() -> None:
    core = master(total=2, in_sync=2, async_master=True)
    plan = core.plan_put(100)
    assert plan.need == 1 and not plan.refused
    assert core.local_durable(100) == [ConfirmTo(100)]  # no slave: the master alone


def test_hello_checks_and_metadata() -> None:
    core = master()
    snapshot = log(3000, version=7)
    core.link_opened(1, now_ms=0)
    effects = core.on_frame(1, SlaveHello(1, 0, 0, 9, SEG, ()), snapshot, now_ms=0)
    assert isinstance(effects[0], SendFrame) and isinstance(effects[0].frame, Refuse)
    assert isinstance(effects[1], CloseLink) and "epoch 9" in effects[1].reason
    core.link_opened(2, now_ms=0)
    core.on_frame(2, SlaveHello(1, 0, 0, 0, SEG, ()), snapshot, now_ms=0)
    effects = core.on_frame(2, Ack(5000), snapshot, now_ms=0)  # outside the master's log
    assert isinstance(effects[-1], CloseLink)
    connect(core, 3, 1, 3000, snapshot)
    assert core.next_send(3, snapshot, now_ms=1) == SendMetadata(3, 7)
    assert not isinstance(core.next_send(3, snapshot, now_ms=2), SendMetadata)
    # A second link from the same broker replaces the first.
    connect(core, 4, 1, 3000, snapshot)
    live = [link for link in core.stats().links if link.state == "TRANSFER"]
    assert [(link.link_id, link.broker_id) for link in live] == [(4, 1)]


def test_a_lagging_member_holds_the_confirm_back_until_it_leaves() -> None:
    core = master(total=3, in_sync=2)
    snapshot = log(2500, epochs=(E(3, 0),))
    core.local_durable(2500)
    connect(core, 1, 1, 2500, snapshot, now_ms=0)
    connect(core, 2, 2, 2500, snapshot, now_ms=0)
    grown = log(3600, epochs=(E(3, 0),))  # more than one batch (1000) past slave 2's ack
    assert core.local_durable(3600) == []  # the slaves lack it
    core.next_send(1, grown, now_ms=10)
    core.next_send(1, grown, now_ms=10)
    core.next_send(2, grown, now_ms=10)
    assert core.on_frame(1, Ack(3600), grown, now_ms=20) == []
    assert core.put_progress(3600, 2, now_ms=0) is PutProgress.DONE  # PUT_OK: two replicas hold it
    assert core.confirm_log_position == 2500  # but slave 2, electable later, does not
    effects = core.on_tick(grown, now_ms=600)  # slave 2 not caught up for > 500 ms
    assert effects == [SyncStateSetChanged((0, 1)), ConfirmTo(3600)]


def test_a_caught_up_slave_joins_while_the_master_keeps_writing() -> None:
    # Alone, the master confirms its own writes at once, so under continuous load the confirm
    # position is always ahead of a slave's ack; a caught-up slave must hold it back to join.
    core = master(total=2, in_sync=2, auto=True)
    core.local_durable(2500)
    snapshot = log(2500, epochs=(E(3, 0),))
    assert connect(core, 1, 1, 2000, snapshot) == []
    for end in range(3000, 6000, 500):
        core.next_send(1, log(end, epochs=(E(3, 0),)), now_ms=end)  # ships up to `end`
        core.local_durable(end + 250)  # the master writes on before the ack comes back
        effects = core.on_frame(1, Ack(end), log(end + 250, epochs=(E(3, 0),)), now_ms=end)
        if core.sync_state_set == (0, 1):
            break
        # caught up with what was sent: a candidate, so confirm stops at its ack
        assert core.confirm_log_position <= end + 250
    assert core.sync_state_set == (0, 1), "the slave never joined under load"
    assert SyncStateSetChanged((0, 1)) in effects


def test_a_put_ships_a_small_tail_itself_even_with_bytes_in_flight() -> None:
    """next_send_idle: the put's thread ships the unsent tail when it is small, acked or not
    (pipelined, in log order, accounted as the sender's sends); a link far behind, with much
    in flight, with metadata due or with nothing new is left to its sender."""
    core = master(total=3, in_sync=2, batch=1 << 20)
    connect(core, 1, 1, 1000, log(1000))
    first = core.next_send_idle(1, log(1200), now_ms=1)
    assert isinstance(first, SendLog) and (first.transfer.log_position, first.size_bytes) == \
        (1000, 200)
    second = core.next_send_idle(1, log(1500), now_ms=2)  # 1200 not acked yet: pipelined
    assert isinstance(second, SendLog) and (second.transfer.log_position, second.size_bytes) \
        == (1200, 300)
    assert core.next_send_idle(1, log(1500), now_ms=3) is None  # nothing new
    far = 1500 + SHIP_FROM_PUT_BYTES_MAX + 1
    assert core.next_send_idle(1, log(far), now_ms=4) is None  # its sender catches it up
    assert core.next_send_idle(1, log(1600, version=1), now_ms=5) is None  # metadata first
    sent = core.next_send(1, log(1600, version=1), now_ms=6)
    assert isinstance(sent, SendMetadata)
    third = core.next_send_idle(1, log(1600, version=1), now_ms=7)
    assert isinstance(third, SendLog) and third.transfer.log_position == 1500
    # a slave that stops acking: past SHIP_FROM_PUT_BYTES_MAX in flight, puts leave it alone
    position, now_ms = 1600, 8
    while True:
        effect = core.next_send_idle(1, log(position + 4000, version=1), now_ms=now_ms)
        if effect is None:
            break
        position += 4000
        now_ms += 1
    assert position - 1000 > SHIP_FROM_PUT_BYTES_MAX - 4000
    core.on_frame(1, Ack(position), log(position + 4000, version=1), now_ms=now_ms)
    assert isinstance(core.next_send_idle(1, log(position + 4000, version=1), now_ms=now_ms),
                      SendLog)  # acked: small again

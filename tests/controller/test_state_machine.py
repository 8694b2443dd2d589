"""The controller's replicated state machine and its election policy, as tables.

Goal: broker-id assignment, SyncStateSet changes fenced by both epochs, elections that raise
the master epoch, cleaning, snapshots, and RocketMQ's election order (alive SyncStateSet
members; keep an alive master; designated broker; epoch, then log position, then priority;
unclean only when enabled). Method: apply commands to a fresh `ControllerState` and compare
statuses and the resulting ReplicaInfo; call `choose_master` on hand-built facts.
"""

from __future__ import annotations

import pytest

from controller.api import ReplicaInfo
from controller.election import BrokerLiveness, choose_master, failover_decision, positions_final
from controller.errors import CodecError
from controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    CleanBrokerData,
    ControllerState,
    ElectMaster,
    decode_command,
    encode_command,
)


def _state_with_three() -> ControllerState:
    state = ControllerState()
    for port in (1, 2, 3):
        state.apply(ApplyBrokerId("c", "a", f"127.0.0.1:{port}"))
    return state


def _info(state: ControllerState) -> ReplicaInfo:
    info = state.replica_info("a")
    assert info is not None
    return info


def test_broker_ids_start_at_one_and_an_address_keeps_its_id() -> None:
    state = ControllerState()
    ids = [state.apply(ApplyBrokerId("c", "a", f"h:{p}")).broker_id for p in (1, 2, 1)]
    assert ids == [1, 2, 1]
    assert state.apply(ApplyBrokerId("c", "b", "h:9")).broker_id == 1  # per replica set
    assert state.apply(ApplyBrokerId("other", "a", "h:3")).status == "INVALID_REQUEST"
    info = _info(state)
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (None, 0, ())


def test_elect_master_raises_both_epochs_and_resets_the_sync_state_set() -> None:
    state = _state_with_three()
    result = state.apply(ElectMaster("a", 0, 2))
    assert result.status == "OK"
    info = _info(state)
    assert (info.master_broker_id, info.master_address) == (2, "127.0.0.1:2")
    assert (info.master_epoch, info.sync_state_set, info.sync_state_set_epoch) == (1, (2,), 1)
    assert state.apply(ElectMaster("a", 0, 3)).status == "FENCED_MASTER_EPOCH"
    assert state.apply(ElectMaster("a", 1, 9)).status == "BROKER_NOT_REGISTERED"
    assert state.apply(ElectMaster("a", 1, None)).status == "MASTER_NOT_AVAILABLE"
    info = _info(state)
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (None, 2, (2,))
    assert info.sync_state_set_epoch == 1
    assert state.apply(ElectMaster("zz", 0, 1)).status == "REPLICA_SET_NOT_FOUND"


def test_an_election_decided_on_an_older_sync_state_set_is_fenced() -> None:
    """Sim seed 17012: a shrink of the SyncStateSet committed between an election's decision
    and its commit must fence it (the chosen broker may have left the set, and the master may
    have acked alone since); without the expected epoch (entries written before the field
    existed) the command applies as it did."""
    state = _state_with_three()
    state.apply(ElectMaster("a", 0, 1))
    assert state.apply(AlterSyncStateSet("a", **_alter(1, 1, (1, 2), 1))).status == "OK"
    decided_on = _info(state)
    assert decided_on.sync_state_set_epoch == 2
    assert state.apply(AlterSyncStateSet("a", **_alter(1, 1, (1,), 2))).status == "OK"
    stale = ElectMaster("a", 1, 2, expected_sync_state_set_epoch=2)
    assert decode_command(encode_command(stale)) == stale
    result = state.apply(stale)
    assert result.status == "FENCED_SYNC_STATE_SET_EPOCH"
    info = _info(state)
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (1, 1, (1,))
    assert state.apply(ElectMaster("a", 1, 1, expected_sync_state_set_epoch=3)).status == "OK"
    assert state.apply(ElectMaster("a", 2, 3)).status == "OK"  # no expectation: as before


def _alter(master_broker_id: int, master_epoch: int, sync_state_set: tuple[int, ...],
           sync_state_set_epoch: int) -> dict[str, object]:
    return {"master_broker_id": master_broker_id, "master_epoch": master_epoch,
            "sync_state_set": sync_state_set, "sync_state_set_epoch": sync_state_set_epoch}


@pytest.mark.parametrize(
    ("request_fields", "status"),
    [
        (_alter(1, 1, (1, 2), 1),
         "OK"),
        # the set it holds: a new epoch (a master fences a proposal it may have in flight)
        (_alter(1, 1, (1,), 1),
         "OK"),
        (_alter(2, 1, (1, 2), 1),
         "INVALID_MASTER"),
        (_alter(1, 0, (1, 2), 1),
         "FENCED_MASTER_EPOCH"),
        (_alter(1, 1, (1, 2), 0),
         "FENCED_SYNC_STATE_SET_EPOCH"),
        (_alter(1, 1, (1, 7), 1),
         "INVALID_REPLICAS"),  # unknown member
        (_alter(1, 1, (2, 3), 1),
         "INVALID_REPLICAS"),  # the master left out
    ],
)
def test_alter_sync_state_set_is_fenced(request_fields: dict[str, object], status: str) -> None:
    state = _state_with_three()
    state.apply(ElectMaster("a", 0, 1))
    before = _info(state)
    result = state.apply(AlterSyncStateSet("a", **request_fields))  # type: ignore[arg-type]
    assert result.status == status
    after = _info(state)
    if status == "OK":
        assert (after.sync_state_set, after.sync_state_set_epoch) == (
            request_fields["sync_state_set"], 2)
        assert after.master_epoch == before.master_epoch
    else:
        assert after == before


def test_clean_broker_data_removes_members_and_fences_a_removed_master() -> None:
    state = _state_with_three()
    state.apply(ElectMaster("a", 0, 1))
    state.apply(AlterSyncStateSet("a", 1, 1, (1, 2, 3), 1))
    assert state.apply(CleanBrokerData("a", (3,))).status == "OK"
    info = _info(state)
    assert [m.broker_id for m in info.brokers] == [1, 2]
    assert (info.sync_state_set, info.sync_state_set_epoch, info.master_epoch) == ((1, 2), 3, 1)
    state.apply(CleanBrokerData("a", (1,)))
    info = _info(state)
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (None, 2, (2,))
    assert state.apply(CleanBrokerData("a", (9,))).status == "BROKER_NOT_REGISTERED"
    assert state.apply(CleanBrokerData("a", ())).status == "OK"
    assert state.replica_info("a") is None
    # ids are not reused after a clean of single brokers, but a cleaned set starts over
    assert state.apply(ApplyBrokerId("c", "a", "h:1")).broker_id == 1


def test_commands_round_trip_and_bad_ones_are_refused() -> None:
    commands = [ApplyBrokerId("c", "a", "h:1"), ElectMaster("a", 3, None),
                AlterSyncStateSet("a", 1, 2, (1, 2), 4), CleanBrokerData("a", ())]
    for command in commands:
        assert decode_command(encode_command(command)) == command
    for bad in (b"nope", b"[]", b'{"command": "x"}', b'{"command": "elect_master"}',
                (b'{"command": "elect_master", "broker_name": "a", '
                b'"expected_master_epoch": "1", "new_master_broker_id": null}')):
        with pytest.raises(CodecError):
            decode_command(bad)


def test_a_snapshot_restores_the_same_state() -> None:
    state = _state_with_three()
    state.apply(ElectMaster("a", 0, 2))
    state.apply(AlterSyncStateSet("a", 2, 1, (1, 2), 1))
    state.apply(ApplyBrokerId("c", "b", "h:7"))
    restored = ControllerState.restore(state.snapshot())
    assert restored.replica_infos() == state.replica_infos()
    assert restored.apply(ApplyBrokerId("c", "a", "h:new")).broker_id == 4
    with pytest.raises(CodecError):
        ControllerState.restore(b'{"replica_sets": [{"info": 1}]}')


# -- election policy -------------------------------------------------------------------------

def _replica(master: int | None, epoch: int, sss: tuple[int, ...]) -> ReplicaInfo:
    state = _state_with_three()
    info = _info(state)
    return ReplicaInfo("c", "a", master, None, epoch, sss, epoch, info.brokers)


def _alive(*facts: tuple[int, ...]) -> dict[int, BrokerLiveness]:
    """(broker id, epoch, max log position, priority[, abandoned epoch]) per broker."""
    return {f[0]: BrokerLiveness(*f) for f in facts}


@pytest.mark.parametrize(
    ("replica", "alive", "designated", "unclean", "expected"),
    [
        # the first election of a set may pick any alive broker
        (_replica(None, 0, ()), _alive((2, 0, 0, 9), (3, 0, 0, 1)), None, False, ("OK", 3)),
        # keep an alive master
        (_replica(1, 4, (1, 2)), _alive((1, 4, 10, 9), (2, 4, 99, 1)), None, False,
         ("MASTER_STILL_EXIST", 1)),
        # a master that abandons its epoch (restarted) is not kept: the best member wins,
        # itself included (a new epoch); abandoning an older epoch changes nothing
        (_replica(1, 4, (1, 2)), _alive((1, 4, 10, 9, 4), (2, 4, 99, 1)), None, False,
         ("OK", 2)),
        (_replica(1, 4, (1, 2)), _alive((1, 4, 99, 9, 4), (2, 4, 10, 1)), None, False,
         ("OK", 1)),
        (_replica(1, 4, (1, 2)), _alive((1, 4, 10, 9, 3), (2, 4, 99, 1)), None, False,
         ("MASTER_STILL_EXIST", 1)),
        # dead master: highest epoch wins over a longer log
        (_replica(1, 4, (1, 2, 3)), _alive((2, 4, 10, 9), (3, 3, 99, 1)), None, False,
         ("OK", 2)),
        # same epoch: the longer log wins over priority
        (_replica(1, 4, (1, 2, 3)), _alive((2, 4, 10, 1), (3, 4, 11, 9)), None, False,
         ("OK", 3)),
        # same epoch and log: the lower priority value wins, then the lower id
        (_replica(1, 4, (1, 2, 3)), _alive((2, 4, 10, 5), (3, 4, 10, 1)), None, False,
         ("OK", 3)),
        (_replica(1, 4, (1, 2, 3)), _alive((2, 4, 10, 5), (3, 4, 10, 5)), None, False,
         ("OK", 2)),
        # outside the SyncStateSet: never, unless unclean election is enabled
        (_replica(1, 4, (1, 2)), _alive((3, 4, 10, 5)), None, False,
         ("MASTER_NOT_AVAILABLE", None)),
        (_replica(1, 4, (1, 2)), _alive((3, 4, 10, 5)), None, True, ("OK", 3)),
        # designated: only if eligible; designating the alive master keeps it
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0), (2, 4, 0, 0)), 2, False, ("OK", 2)),
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0), (3, 4, 0, 0)), 3, False,
         ("ELECT_MASTER_FAILED", None)),
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0), (3, 4, 0, 0)), 3, True, ("OK", 3)),
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0)), 1, False, ("MASTER_STILL_EXIST", 1)),
        # an alive broker that is not registered (cleaned) is never chosen
        (_replica(1, 4, (1, 9)), _alive((9, 9, 99, 0)), None, True,
         ("MASTER_NOT_AVAILABLE", None)),
    ],
)
def test_choose_master(replica: ReplicaInfo, alive: dict[int, BrokerLiveness],
                       designated: int | None, unclean: bool,
                       expected: tuple[str, int | None]) -> None:
    election = choose_master(replica, alive, designated_broker_id=designated,
                             unclean_enabled=unclean)
    assert (election.status, election.broker_id) == expected


@pytest.mark.parametrize(
    ("replica", "alive", "lost", "led_for_ms", "expected"),
    [
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0), (2, 4, 0, 0)), (), 10_000, None),  # alive
        # alive, but it abandons its epoch: elect now (no grace: its heartbeat says so), once
        # the other member reported it lost the master
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0, 4), (2, 4, 5, 0)), (2,), 0, ("OK", 2)),
        (_replica(1, 4, (1, 2)), _alive((1, 4, 0, 0, 4), (2, 4, 5, 0)), (), 0, None),
        (_replica(1, 4, (1, 2)), _alive((2, 4, 0, 0)), (2,), 500, None),  # new leader: wait
        (_replica(1, 4, (1, 2)), _alive((2, 4, 0, 0)), (2,), 3000, ("OK", 2)),
        (_replica(1, 4, (1, 2)), {}, (), 10_000, None),  # nobody alive: nothing to do
        (_replica(1, 4, (1, 2)), _alive((3, 4, 0, 0)), (), 10_000,
         ("MASTER_NOT_AVAILABLE", None)),
        (_replica(None, 5, (1, 2)), _alive((3, 4, 0, 0)), (), 10_000, None),  # already fenced
        # fenced "no master": every member of the set must be heard (the old one is one)
        (_replica(None, 5, (1, 2)), _alive((2, 4, 0, 0)), (), 0, None),
        (_replica(None, 5, (1, 2)), _alive((1, 4, 0, 0), (2, 4, 5, 0)), (), 0, ("OK", 2)),
        (_replica(None, 0, ()), _alive((3, 0, 0, 0)), (), 0, ("OK", 3)),  # first election
        # the chaos ring partition (seed 61): master 1 and slave 2 cut off from the leader,
        # slave 3 heard alone; 1 acked puts with 2's ack that 3 lacks: 3 must not be elected
        (_replica(1, 4, (1, 2, 3)), _alive((3, 4, 900, 0)), (3,), 10_000, None),
        # 2 heard too, but still linked to the old master (no loss reported): not final yet
        (_replica(1, 4, (1, 2, 3)), _alive((2, 4, 800, 0), (3, 4, 900, 0)), (3,), 10_000, None),
        (_replica(1, 4, (1, 2, 3)), _alive((2, 4, 950, 0), (3, 4, 900, 0)), (2, 3), 10_000,
         ("OK", 2)),
    ],
)
def test_failover_decision(replica: ReplicaInfo, alive: dict[int, BrokerLiveness],
                           lost: tuple[int, ...], led_for_ms: int,
                           expected: tuple[str, int | None] | None) -> None:
    decision = failover_decision(replica, alive, reported_lost=lost, led_for_ms=led_for_ms,
                                 heartbeat_timeout_ms=3000, unclean_enabled=False)
    assert (None if decision is None else (decision.status, decision.broker_id)) == expected


def test_unclean_election_does_not_wait_for_final_positions() -> None:
    decision = failover_decision(_replica(1, 4, (1, 2, 3)), _alive((3, 4, 900, 0)),
                                 reported_lost=(), led_for_ms=10_000, heartbeat_timeout_ms=3000,
                                 unclean_enabled=True)
    assert decision is not None and (decision.status, decision.broker_id) == ("OK", 3)


def test_a_master_is_replaced_only_with_every_other_member_final() -> None:
    # Master 1 gone; slaves 2 and 3 in the set. Slave 2 reported the loss (final position);
    # slave 3's last heartbeat predates one and may understate its log (or it may still be
    # acking for the old master).
    replica = _replica(1, 4, (1, 2, 3))
    alive = _alive((2, 4, 900, 0), (3, 4, 800, 0))
    assert not positions_final(replica, alive, {2})
    assert positions_final(replica, alive, {2, 3})
    # A member of the set that is not heard stops it: it may hold acks the others lack.
    assert not positions_final(replica, _alive((2, 4, 900, 0)), {2})
    # A member outside the set is not waited for.
    assert positions_final(_replica(1, 4, (1, 2)), alive, {2})
    # The first election replaces nobody.
    assert positions_final(_replica(None, 0, ()), {}, ())

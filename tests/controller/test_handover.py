"""A master's graceful handover on the controller side, as tables and replays.

Goal: the leader elects the successor a sealed master names only when the replicated state
agrees (it is the master of that epoch, the target is another alive member of the
SyncStateSet that is not leaving, and it acked the sealed log end); the ElectMaster it
proposes carries reason "handover", and the state machine checks the SyncStateSet again, so
replaying the same log anywhere gives the same state, and a handover overtaken by another
election is fenced. Lame ducks (leaving brokers) are not chosen while another member can be.
Method: pure functions and ControllerState on hand-built facts.
"""

from __future__ import annotations

import dataclasses

import pytest

from controller.api import HandoverRequest, ReplicaInfo
from controller.election import BrokerLiveness, choose_master, failover_decision
from controller.handover import decide_handover
from controller.state import (
    HANDOVER,
    AlterSyncStateSet,
    ApplyBrokerId,
    Command,
    ControllerState,
    ElectMaster,
    decode_command,
    encode_command,
)


def _with_master_and_set() -> ControllerState:
    """Set "a": brokers 1, 2, 3; master 1 at epoch 1; SyncStateSet {1, 2} (3 lags)."""
    state = ControllerState()
    for port in (1, 2, 3):
        state.apply(ApplyBrokerId("c", "a", f"127.0.0.1:{port}"))
    assert state.apply(ElectMaster("a", 0, 1)).status == "OK"
    assert state.apply(AlterSyncStateSet("a", 1, 1, (1, 2), 1)).status == "OK"
    return state


def _info(state: ControllerState) -> ReplicaInfo:
    info = state.replica_info("a")
    assert info is not None
    return info


def _alive(*ids: int, leaving: tuple[int, ...] = ()) -> dict[int, BrokerLiveness]:
    return {i: BrokerLiveness(i, 1, 100, 5, leaving=i in leaving) for i in ids}


def _request(**changes: object) -> HandoverRequest:
    base = HandoverRequest("a", 1, "127.0.0.1:1", master_epoch=1, sealed_log_position=100,
                           target_broker_id=2, target_acked_log_position=100)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(("request_changes", "alive", "status"), [
    ({}, _alive(1, 2, 3), "OK"),
    ({"broker_id": 2, "broker_address": "127.0.0.1:2"}, _alive(1, 2, 3), "INVALID_MASTER"),
    ({"master_epoch": 0}, _alive(1, 2, 3), "FENCED_MASTER_EPOCH"),
    ({"target_broker_id": 1}, _alive(1, 2, 3), "INVALID_REPLICAS"),
    ({"target_broker_id": 3}, _alive(1, 2, 3), "INVALID_REPLICAS"),  # not in the set
    ({}, _alive(1, 3), "ELECT_MASTER_FAILED"),  # the target is not alive
    ({}, _alive(1, 2, 3, leaving=(2,)), "ELECT_MASTER_FAILED"),  # it is leaving too
    ({"target_acked_log_position": 99}, _alive(1, 2, 3), "ELECT_MASTER_FAILED"),
])
def test_a_handover_is_decided_on_the_replicated_state(
        request_changes: dict[str, object], alive: dict[int, BrokerLiveness],
        status: str) -> None:
    state = _with_master_and_set()
    decided, command = decide_handover(_info(state), _request(**request_changes), alive)
    assert decided == status
    assert (command is None) == (status != "OK")
    if command is not None:
        assert command == ElectMaster("a", 1, 2, 2, HANDOVER)


def test_an_unknown_set_is_refused() -> None:
    assert decide_handover(None, _request(), _alive(1, 2)) == ("REPLICA_SET_NOT_FOUND", None)


def test_the_handover_election_applies_and_replays_to_the_same_state() -> None:
    state = _with_master_and_set()
    _, command = decide_handover(_info(state), _request(), _alive(1, 2, 3))
    assert command is not None
    result = state.apply(command)
    assert result.status == "OK"
    info = _info(state)
    assert (info.master_broker_id, info.master_epoch, info.sync_state_set) == (2, 2, (2,))
    # the same log, encoded and decoded as the Raft log stores it, gives the same snapshot
    log: list[Command] = [ApplyBrokerId("c", "a", f"127.0.0.1:{p}") for p in (1, 2, 3)]
    log += [ElectMaster("a", 0, 1), AlterSyncStateSet("a", 1, 1, (1, 2), 1), command]
    replayed = ControllerState()
    for entry in log:
        replayed.apply(decode_command(encode_command(entry)))
    assert replayed.snapshot() == state.snapshot()
    # the reason survives the log; an entry without one encodes as before the field existed
    assert decode_command(encode_command(command)) == command
    assert b"reason" not in encode_command(ElectMaster("a", 0, 1))


def test_a_handover_overtaken_by_another_election_is_fenced() -> None:
    state = _with_master_and_set()
    _, command = decide_handover(_info(state), _request(), _alive(1, 2, 3))
    assert command is not None
    # the watchdog or an operator elected first (same epoch): the handover's entry is fenced
    assert state.apply(ElectMaster.decided_on(_info(state), 2)).status == "OK"
    before = state.snapshot()
    assert state.apply(command).status == "FENCED_MASTER_EPOCH"
    assert state.snapshot() == before


def test_the_state_machine_refuses_a_handover_to_a_member_outside_the_set() -> None:
    """A proposer that skipped decide_handover (or an older one) cannot elect a lagging
    slave by a handover: the check is in the state, so every replica refuses it alike."""
    state = _with_master_and_set()
    before = state.snapshot()
    for target in (3, 1, None):
        command = ElectMaster.decided_on(_info(state), target, reason=HANDOVER)
        assert state.apply(command).status == "ELECT_MASTER_FAILED"
    assert state.snapshot() == before
    # a SyncStateSet change committed after the decision fences it as any election
    _, command = decide_handover(_info(state), _request(), _alive(1, 2, 3))
    assert command is not None
    assert state.apply(AlterSyncStateSet("a", 1, 1, (1,), 2)).status == "OK"
    assert state.apply(command).status == "FENCED_SYNC_STATE_SET_EPOCH"


def test_lame_ducks_are_not_elected_while_another_member_can_be() -> None:
    state = _with_master_and_set()
    info = dataclasses.replace(_info(state), master_broker_id=None, master_address=None)
    best_is_leaving = {1: BrokerLiveness(1, 1, 200, 5, leaving=True),
                       2: BrokerLiveness(2, 1, 100, 5)}
    assert choose_master(info, best_is_leaving).broker_id == 2
    assert choose_master(info, best_is_leaving, designated_broker_id=1).status == (
        "ELECT_MASTER_FAILED")
    everyone_leaving = {1: BrokerLiveness(1, 1, 200, 5, leaving=True),
                        2: BrokerLiveness(2, 1, 100, 5, leaving=True)}
    assert choose_master(info, everyone_leaving).broker_id == 1  # better than no master
    # a leaving master that still serves is kept: no scan replaces it (its handover does)
    serving = _info(state)
    assert choose_master(serving, {1: BrokerLiveness(1, 1, 200, 5, leaving=True),
                                   2: BrokerLiveness(2, 1, 200, 5)}).status == (
        "MASTER_STILL_EXIST")
    assert failover_decision(serving, {1: BrokerLiveness(1, 1, 200, 5, leaving=True)},
                             reported_lost=(), led_for_ms=10_000, heartbeat_timeout_ms=3000,
                             unclean_enabled=False) is None

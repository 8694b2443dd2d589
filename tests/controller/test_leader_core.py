"""The controller leader's answers (controller/leader_core.py): state and liveness in, answers out.

Goal: what controller/node.py and the cluster simulator's controller both answer, as tables:
a heartbeat's status, role, master_silent and wake-up (elect now, probe the master); the
refusal of a SyncStateSet naming a broker that is not alive; the scan's decision from the
liveness table. Method: plain calls on hand-made replica sets and a real LiveTable.
"""

from __future__ import annotations

import pytest

from controller.api import BrokerHeartbeat, BrokerMember, ReplicaInfo, role_of
from controller.leader_core import (
    HeartbeatAnswer,
    Wake,
    answer_heartbeat,
    lease_held,
    refuse_sync_state_set,
    scan_decision,
)
from controller.liveness import LiveTable

MEMBERS = (BrokerMember(1, "h:1"), BrokerMember(2, "h:2"), BrokerMember(3, "h:3"))
REPLICA = ReplicaInfo("c", "a", 1, "h:1", 3, (1, 2), 4, MEMBERS)  # master 1 of epoch 3
HEADLESS = ReplicaInfo("c", "a", None, None, 3, (1, 2), 4, MEMBERS)
TIMEOUT_MS = 1000


def heartbeat(broker_id: int, *, unreachable: int = 0, abandoned: int = 0,
              position: int = 0) -> BrokerHeartbeat:
    return BrokerHeartbeat("c", "a", broker_id, f"h:{broker_id}", 3, position,
                           master_unreachable_epoch=unreachable,
                           master_epoch_abandoned=abandoned)


def answer(replica: ReplicaInfo | None, request: BrokerHeartbeat, *, lease_held: bool = False,
           silent_ms: int | None = 0) -> HeartbeatAnswer:
    return answer_heartbeat(replica, request, lease_held=lease_held, master_silent_ms=silent_ms,
                            heartbeat_timeout_ms=TIMEOUT_MS)


def test_a_stranger_is_not_registered() -> None:
    assert answer(REPLICA, heartbeat(9)).status == "BROKER_NOT_REGISTERED"
    assert answer(None, heartbeat(1)).status == "BROKER_NOT_REGISTERED"


def test_a_member_hears_its_role() -> None:
    for broker_id in (1, 2, 3):
        got = answer(REPLICA, heartbeat(broker_id))
        assert (got.status, got.role, got.wake) == ("OK", role_of(REPLICA, broker_id), Wake.NONE)


def test_an_operators_election_holds_the_masters_lease() -> None:
    got = answer(REPLICA, heartbeat(1), lease_held=True)
    assert got.status == "OK" and got.role is None  # no role: no lease renewal


@pytest.mark.parametrize(("broker_id", "silent_ms", "expected"), [
    (2, 499, False), (2, 500, True),  # half the timeout
    (1, 900, False),  # the master itself is never told its own silence
    (2, None, False),
])
def test_master_silent(broker_id: int, silent_ms: int | None, expected: bool) -> None:
    assert answer(REPLICA, heartbeat(broker_id), silent_ms=silent_ms).master_silent is expected


def test_wake_ups() -> None:
    assert answer(HEADLESS, heartbeat(2)).wake is Wake.ELECT  # no master: elect now
    assert answer(REPLICA, heartbeat(1, abandoned=3)).wake is Wake.ELECT  # REELECT
    assert answer(REPLICA, heartbeat(1, abandoned=2)).wake is Wake.NONE  # an older epoch
    assert answer(REPLICA, heartbeat(2, unreachable=3)).wake is Wake.PROBE
    assert answer(REPLICA, heartbeat(3, unreachable=3)).wake is Wake.NONE  # not in the set
    assert answer(REPLICA, heartbeat(2, unreachable=2)).wake is Wake.NONE  # an older master


def test_a_sync_state_set_naming_a_dead_broker_is_refused() -> None:
    assert refuse_sync_state_set(None, (1,), {1: None}) == "REPLICA_SET_NOT_FOUND"
    assert refuse_sync_state_set(REPLICA, (1, 3), {1: None, 2: None}) == "INVALID_REPLICAS"
    assert refuse_sync_state_set(REPLICA, (1, 2), {1: None, 2: None}) is None


def test_the_scan_elects_from_the_liveness_table() -> None:
    live = LiveTable(heartbeat_timeout_ms=TIMEOUT_MS, brokers_max=16)
    for broker_id, position in ((1, 100), (2, 90)):
        live.heartbeat(heartbeat(broker_id, position=position), 0)
    # master alive: nothing; a new leader waits one timeout before it trusts its table
    assert scan_decision(REPLICA, live, 10, leader_since_ms=0, heartbeat_timeout_ms=TIMEOUT_MS,
                         unclean_enabled=False) is None
    live.heartbeat(heartbeat(2, unreachable=3, position=90), 1500)  # its final position
    live.expire(1500)  # the master's heartbeats stopped at 0
    decision = scan_decision(REPLICA, live, 1500, leader_since_ms=0,
                             heartbeat_timeout_ms=TIMEOUT_MS, unclean_enabled=False)
    assert decision is not None and decision.broker_id == 2
    assert scan_decision(REPLICA, live, 1500, leader_since_ms=1000,
                         heartbeat_timeout_ms=TIMEOUT_MS, unclean_enabled=False) is None


def test_an_election_decided_and_not_yet_applied_holds_the_old_masters_lease() -> None:
    """Finding 11 (sim seed 45): from the decision to replace master 1 of epoch 3 until the
    election's outcome, its heartbeats get no role, so no answer renews its lease; other
    members, another epoch or another master are not held."""
    holds = {"a": (3, 1)}
    assert lease_held(holds, REPLICA, 1)
    assert answer(REPLICA, heartbeat(1), lease_held=lease_held(holds, REPLICA, 1)).role is None
    assert not lease_held(holds, REPLICA, 2)  # a slave learns its role as before
    assert answer(REPLICA, heartbeat(2), lease_held=lease_held(holds, REPLICA, 2)).role \
        == role_of(REPLICA, 2)
    assert not lease_held({"a": (2, 1)}, REPLICA, 1)  # a hold of an older epoch
    assert not lease_held({"a": (3, None)}, HEADLESS, 1)  # no master to hold
    assert not lease_held({}, REPLICA, 1)

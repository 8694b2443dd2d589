"""The controller leader's answers (controller/leader_core.py): state and liveness in, answers out.

Goal: what controller/node.py and the cluster simulator's controller both answer, as tables:
a heartbeat's status, role, master_silent and wake-up (elect now, probe the master); the
refusal of a SyncStateSet naming a broker that is not alive; the scan's decision from the
liveness table; no lease renewal from a new leader whose state may miss its predecessor's
election. Method: plain calls on hand-made replica sets and a real LiveTable; the leader
change on real Raft nodes (tests/controller/cluster.py, messages stepped one by one) applying
to real ControllerStates.
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
    state_current,
)
from controller.liveness import LiveTable
from controller.raft import EntryKind, Role
from controller.state import (
    ApplyBrokerId,
    ControllerState,
    ElectMaster,
    decode_command,
    encode_command,
)
from tests.controller.cluster import Cluster

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


def _states(cluster: Cluster) -> dict[int, ControllerState]:
    """Each node's state machine, from what it applied."""
    states = {}
    for node_id in cluster.ids:
        state = states[node_id] = ControllerState()
        for entry in cluster.applied[node_id]:
            if entry.kind is EntryKind.NORMAL:
                state.apply(decode_command(entry.data))
    return states


def _step(cluster: Cluster) -> None:
    message = cluster.queue.pop(0)
    if (message.from_id, message.to_id) not in cluster.cuts:
        cluster.nodes[message.to_id].step(message)
        cluster.process(message.to_id)


def _answer_as_node(cluster: Cluster, node_id: int, broker_id: int) -> HeartbeatAnswer:
    """handlers.py `_broker_heartbeat`'s answer on `node_id` (no operator or scan holds)."""
    node, replica = cluster.nodes[node_id], _states(cluster)[node_id].replica_info("a")
    current = state_current(node.log, node.term)
    return answer(replica, heartbeat(broker_id), lease_held=not current)


def test_a_new_leader_renews_no_lease_before_it_applied_its_own_term() -> None:
    """Leader 1 commits the election of broker 2 (master 1 of epoch 1 replaced, epoch 2) on
    itself and node 2, then is cut off before node 2 learns the commit. Node 2 leads; its
    state still says broker 1 is master of epoch 1. Answering broker 1's heartbeat from it
    would name broker 1 master again and renew its lease past the election that replaced it
    (under auto-isr such a master acks with a majority that may leave broker 2 out). Until
    node 2 has applied its own NOOP it answers with no role; then with the log's masters."""
    cluster = Cluster(3)
    cluster.elect(1)
    for command in [ApplyBrokerId("c", "a", f"h:{n}") for n in (1, 2, 3)] + \
            [ElectMaster("a", 0, 1)]:
        cluster.propose(1, encode_command(command))
    cluster.isolate(3)
    cluster.nodes[1].propose(encode_command(ElectMaster("a", 1, 2)))
    cluster.process(1)
    _step(cluster)  # node 2 appends the entry
    _step(cluster)  # node 1 hears the ack: committed and applied there
    assert _states(cluster)[1].replica_info("a").master_broker_id == 2  # type: ignore[union-attr]
    cluster.queue.clear()
    cluster.heal()
    cluster.isolate(1)
    for node_id in (2, 3):
        node = cluster.nodes[node_id]
        node.election_elapsed_ticks = node.config.election_timeout_ticks
    cluster.nodes[2].campaign()
    cluster.process(2)
    while cluster.nodes[2].role is not Role.LEADER:
        _step(cluster)
    stale = _states(cluster)[2].replica_info("a")
    assert stale is not None and (stale.master_broker_id, stale.master_epoch) == (1, 1)
    assert answer(stale, heartbeat(1)).role == role_of(stale, 1)  # what it would have renewed
    held = _answer_as_node(cluster, 2, 1)
    assert held.status == "OK" and held.role is None
    while cluster.queue:
        _step(cluster)
    fresh = _states(cluster)[2].replica_info("a")
    assert fresh is not None and (fresh.master_broker_id, fresh.master_epoch) == (2, 2)
    assert _answer_as_node(cluster, 2, 2).role == role_of(fresh, 2)
    assert _answer_as_node(cluster, 2, 1).role == role_of(fresh, 1)  # a slave now



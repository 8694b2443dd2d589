"""Network partitions across test hosts: what must hold when a machine is cut off, not killed.

Goal (issue 17): a master that is alive but cut off keeps answering the clients that still
reach it, which a SIGKILL never shows. Every scenario runs a real cluster with each controller
and broker on its own test host (`rocketha-cluster up --hosts`, ha/cluster/netns.py) and a
producer in the root namespace, which stays reachable from every host.

- master cut off from everything but the producer (nftables rules inside its host, `drop` =
  silence and `reject` = connection refused, which the controller's TCP probe of a lost master
  takes as proof of death): the controller elects a slave of the SyncStateSet; the isolated
  master acknowledges nothing the new master does not hold (its accepted SyncStateSet stays the
  controller's: it never shrinks it alone); heal: it rejoins as a slave, its fork is cut, and
  every acknowledged message is on the new master exactly once, at the offset its ack named,
  with the replicas byte-identical below the confirm position.
- the controller leader's host loses its link: a new leader within seconds, no failover, and
  producing and consuming never pause; it rejoins as a follower.
- a slave cut off past haMaxTimeSlaveNotCatchup leaves the SyncStateSet and rejoins after the
  heal, byte-identical below the confirm position; then a client that reaches only the slaves
  reads every acknowledged message from them (the master served none of those reads).

With inSyncReplicas=1 a put is acked on the master alone, so the acks a cut-off master gives
before its lease lapses are lost at the failover by that rule (as after a crash; first seen here:
1,362 of 1,930 acks in one run). What must hold is the lease: nothing acknowledged after the
lease could have lapsed is lost, and everything else holds as above (slow variant).
A producer that reaches both the controller and the cut-off master re-reads its routes after
each FLUSH_SLAVE_TIMEOUT, so it moves to the new master (asserted: acks after the election).

Method: FailoverCluster(hosts=True) and its Load (one idempotent producer thread resending
until PUT_OK, history checked with Jepsen's total-queue checks), faults from
FailoverCluster.network. Controller timers are shortened (controllerHeartbeatTimeoutMs=1500).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Consumer, Producer
from controller.api import lease_max_ms
from ha.cluster.netns import HostNetwork
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import (
    QUEUES,
    FailoverCluster,
    Load,
    Reader,
    check_history,
    commitlog_bytes,
    counts,
    read_topic,
)
from tests.integration.test_controller_failover import (
    CONTROLLER_ELECTION_MAX_S,
    QUORUM_AUTO,
    SET_A,
    _assert_exactly_once,
    _assert_rejoined_identical,
    _producer_config,
    _run_id,
    _tear_down,
    _wait_data_plane,
)

pytestmark = pytest.mark.integration

# a dead master is noticed after 1.5 s; its lease is at most 2/3 of that
# (ha/replication/master_core.py)
CONTROLLER_FAST = {"controllerHeartbeatTimeoutMs": "1500", "scanNotActiveBrokerIntervalMs": "200",
                   "raftElectionTimeoutTicks": "6"}
QUORUM_ONE = {"inSyncReplicas": "1"}  # a put is acked on the master alone
ELECTION_DEADLINE_S = 20.0
ACKS_BEFORE = 100  # the load runs at full speed when the cut comes
ACKS_AFTER = 100  # the producer moved on to the new master
CONTROLLER_CUT_WINDOW_S = 4.0  # produce and consume are watched this long after the cut
PARTITION_HELD_S = 2.0  # the partition outlasts the election by this much
LATE_REPLY_S = 0.2  # a reply decided before the lease lapsed may arrive this much later


def _partitioned_master(tmp_path: Path, *, action: str, quorum: dict[str, str],
                        acks_on_master_alone: bool = False) -> None:
    cluster = load = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, hosts=True,
                                  controller_settings=CONTROLLER_FAST, **quorum)
        network = cluster.network
        assert network is not None
        old, old_info = cluster.wait_master(SET_A)
        before = cluster.wait_full_sync_state_set(old, 3)
        old_epoch = old_info["master_epoch"]
        load = Load(_producer_config(cluster), "orders", _run_id(),
                    messages_max=1_000_000).start()
        load.wait_acks(ACKS_BEFORE)
        cut_at = time.monotonic()
        network.isolate(cluster.host(old), allow=[network.root_address], action=action)

        new, new_info = cluster.wait_master(SET_A, min_epoch=old_epoch + 1, exclude=[old],
                                            timeout_s=ELECTION_DEADLINE_S)
        elected_at = time.monotonic()
        new_id = new_info["controller"]["broker_id"]
        assert new_id in before, (new_id, before)
        fresh = Producer(_producer_config(cluster))  # routes from the controller: the new master
        try:
            assert fresh.send("orders", b"fresh", key="fresh").status == "PUT_OK"
        finally:
            fresh.close()
        time.sleep(PARTITION_HELD_S)  # the old master keeps getting the load's puts meanwhile
        isolated = cluster.info_now(old)  # the root namespace still reaches it
        # a shrink counts only once the controller accepted it, and it cannot reach it
        assert sorted(isolated["accepted_sync_state_set"]) == sorted(before), isolated
        healed_at = time.monotonic()
        network.heal()
        _assert_rejoined_identical(cluster, old, new, new_info["master_epoch"])
        load.wait_acks(len(load.acked) + ACKS_AFTER, timeout_s=ELECTION_DEADLINE_S)
        load.stop()
        during = [a for a in load.acks_after(cut_at) if a.acked_at < healed_at]
        print(f"\n{action}: {old} cut off, {new} master (epoch {new_info['master_epoch']}) "
              f"{elected_at - cut_at:.2f}s later; {len(during)} acks while cut off; outcomes "
              f"{dict(counts(load))}")
        assert load.acks_after(elected_at + PARTITION_HELD_S / 2), \
            "the producer stayed with the cut-off master"
        cluster.wait_confirm_at_end(new)
        found = read_topic(cluster.endpoint(new), "orders")
        if acks_on_master_alone:
            _assert_lost_only_under_the_lease(load, found, cut_at)
        else:
            _assert_exactly_once(load, found)
    finally:
        _tear_down(cluster, load)


def _assert_lost_only_under_the_lease(load: Load, found: dict[tuple[int, int], bytes],
                                      cut_at: float) -> None:
    """inSyncReplicas=1: lost acks are only the cut-off master's own, given before its lease
    (at most lease_max_ms after its last heartbeat, so before the cut plus that) lapsed."""
    verdict = check_history(load, found)
    lapsed_by = cut_at + lease_max_ms(int(CONTROLLER_FAST["controllerHeartbeatTimeoutMs"])) \
        / 1000 + LATE_REPLY_S
    late = [seq for seq in verdict.lost if load.acked[seq].acked_at >= lapsed_by]
    print(f"lost by the inSyncReplicas=1 rule: {len(verdict.lost)} of {verdict.acked}")
    assert not late, f"acked after the lease lapsed, then lost: {late[:5]}; {verdict.summary()}"
    assert not verdict.unexpected and not verdict.duplicated, verdict.summary()
    assert not verdict.order_violations, verdict.summary()


@pytest.mark.parametrize("action", ["drop", "reject"])
def test_cut_off_master_acknowledges_nothing_it_loses(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path, action: str) -> None:
    _partitioned_master(tmp_path, action=action, quorum=QUORUM_AUTO)


@pytest.mark.slow
@pytest.mark.parametrize("action", ["drop", "reject"])
def test_cut_off_master_with_in_sync_replicas_one_acks_alone_only_under_its_lease(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path, action: str) -> None:
    _partitioned_master(tmp_path, action=action, quorum=QUORUM_ONE, acks_on_master_alone=True)


def test_a_bridge_partition_never_elects_a_slave_missing_acks(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path) -> None:
    """Chaos finding (seed 61, `--faults shape`): a partial partition. The master M and slave
    S1 reach each other but not the controller; slave S2 reaches the controller but not M. M
    keeps acknowledging under its lease with S1's ack (inSyncReplicas=2 of 3), so S2 lacks
    those puts: electing S2, the only member the controller heard, cut them as a fork (156
    acks in the campaign). Now an election waits until every other member of the SyncStateSet
    reported its final position (controller/election.py positions_final): no election while
    S1 is unheard; M, past its lease, acks only what every member holds (nothing, with S2 cut
    off); after the heal M goes on as master and every acknowledged put is there once."""
    cluster = load = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, hosts=True,
                                  controller_settings=CONTROLLER_FAST, **QUORUM_AUTO)
        network = cluster.network
        assert network is not None
        master, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 3)
        epoch = info["master_epoch"]
        s1, s2 = sorted(name for name in cluster.members(SET_A) if name != master)
        controller = cluster.host(next(iter(cluster.controllers)))
        load = Load(_producer_config(cluster), "orders", _run_id(),
                    messages_max=1_000_000).start()
        load.wait_acks(ACKS_BEFORE)
        cut_at = time.monotonic()
        for name in (master, s1):  # M and S1 lose the controller
            network.block(cluster.host(name), controller.address, direction="both")
        network.block(cluster.host(master), cluster.host(s2).address, direction="both")
        # past the heartbeat timeout (an election would have happened) and a bit more
        held_s = int(CONTROLLER_FAST["controllerHeartbeatTimeoutMs"]) / 1000 + 3.0
        time.sleep(held_s)
        during = load.acks_after(cut_at)
        state = cluster.replica_state(SET_A)
        network.heal()
        healed_at = time.monotonic()
        load.wait_acks(len(load.acked) + ACKS_AFTER, timeout_s=ELECTION_DEADLINE_S)
        load.stop()
        final = cluster.master_now(SET_A)
        assert final is not None
        print(f"\nbridge: {master} and {s1} cut from the controller, {s2} from {master}; "
              f"{len(during)} acks while cut; state while cut {state}; master after heal "
              f"{final[0]} (epoch {final[1]['master_epoch']}); outcomes {dict(counts(load))}")
        cluster.wait_confirm_at_end(final[0])
        _assert_exactly_once(load, read_topic(cluster.endpoint(final[0]), "orders"))
        # S2 alone was heard: it must not have been elected (it lacks M's acks)
        assert state["master_epoch"] == epoch and state["master_broker_id"] is not None, state
        assert load.acks_after(healed_at), "no put acknowledged after the heal"
    finally:
        _tear_down(cluster, load)


def test_cut_off_controller_leader_never_stops_the_data_plane(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path) -> None:
    """The controller leader's host loses its link: a new leader within seconds, the master
    keeps its term (no failover), producing and consuming never pause, and clients that list
    the cut-off controller first still find the master; heal: it rejoins as a follower."""
    cluster = load = reader = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=3, replicas=2, hosts=True,
                                  controller_settings=CONTROLLER_FAST, **QUORUM_AUTO)
        network = cluster.network
        assert network is not None
        master, _ = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 2)
        state = cluster.replica_state(SET_A)
        load = Load(_producer_config(cluster), "orders", _run_id(),
                    messages_max=1_000_000).start()
        load.wait_acks(100)
        reader = Reader(_producer_config(cluster), "orders").start()
        reader.wait_rows_after(0.0, 50)
        leader = cluster.wait_controller_leader()
        cut_at = time.monotonic()
        network.link_down(cluster.host(leader))
        new_leader = cluster.wait_controller_leader(exclude=[leader], timeout_s=10)
        election_s = time.monotonic() - cut_at
        assert election_s < CONTROLLER_ELECTION_MAX_S, election_s
        gap_s = _wait_data_plane(load, reader, cut_at, window_s=CONTROLLER_CUT_WINDOW_S)
        fresh = Producer(ClientConfig(controller=",".join(
            [cluster.endpoint(leader)] + [cluster.endpoint(n) for n in cluster.controllers
                                          if n != leader]), request_timeout_ms=3000))
        try:
            assert fresh.send("orders", b"fresh-client").status == "PUT_OK"
        finally:
            fresh.close()
        assert cluster.replica_state(SET_A) == state  # same master, epoch and SyncStateSet
        assert cluster.info_now(master)["role"] == "MASTER"
        network.heal()
        wait_for(lambda: cluster.controller_role(leader) == "follower", 15,
                 f"{leader} to rejoin as a follower")
        load.stop()
        reader.stop()
        print(f"\ncontroller leader {leader} cut off -> {new_leader} leads after "
              f"{election_s:.2f}s; longest PUT_OK pause {gap_s:.2f}s")
        cluster.wait_confirm_at_end(master)
        found = read_topic(cluster.endpoint(master), "orders")
        _assert_exactly_once(load, found)
        assert not reader.check_against(found), reader.check_against(found)[:5]
    finally:
        _tear_down(cluster, load, reader)


def test_slave_cut_off_past_catchup_limit_then_reads_from_slaves_only(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path) -> None:
    """A slave cut off longer than haMaxTimeSlaveNotCatchup leaves the SyncStateSet (the
    controller accepts the shrink; the master keeps acking with the rest), and after the heal
    rejoins it, catches up and holds the master's bytes below the confirm position. Then a
    client that reaches only the slaves (the root namespace blocked inside the master's host,
    slaveReadEnable) reads every acknowledged message from them, up to their confirm
    position."""
    cluster = load = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, hosts=True,
                                  controller_settings=CONTROLLER_FAST, **QUORUM_AUTO)
        network = cluster.network
        assert network is not None
        master, _ = cluster.wait_master(SET_A)
        full = cluster.wait_full_sync_state_set(master, 3)
        load = Load(_producer_config(cluster), "orders", _run_id(),
                    messages_max=1_000_000).start()
        load.wait_acks(100)
        slave = next(name for name in cluster.members(SET_A) if name != master)
        slave_id = cluster.info_now(slave)["controller"]["broker_id"]
        network.isolate(cluster.host(slave), allow=[network.root_address], action="drop")
        wait_for(lambda: slave_id not in cluster.replica_state(SET_A)["sync_state_set"],
                 ELECTION_DEADLINE_S, f"{slave} to leave the accepted SyncStateSet")
        load.wait_acks(len(load.acked) + ACKS_AFTER)  # the others ack without it
        network.heal()
        cluster.wait_full_sync_state_set(master, 3, timeout_s=ELECTION_DEADLINE_S)
        assert sorted(cluster.replica_state(SET_A)["sync_state_set"]) == sorted(full)
        load.wait_acks(len(load.acked) + ACKS_AFTER)
        load.stop()
        end = cluster.wait_confirm_at_end(master)
        assert cluster.wait_converged(slave, master) == end
        assert commitlog_bytes(cluster.store_dir(slave), end) == \
            commitlog_bytes(cluster.store_dir(master), end)

        # only the slaves are reachable from here: reads go on from them
        reads_before = {name: _get_requests(cluster, name) for name in cluster.members(SET_A)}
        network.block(cluster.host(master), network.root_address, action="drop")
        consumer_config = ClientConfig(controller=cluster.controller_addr, retries_max=10,
                                       request_timeout_ms=2000, backoff_max_ms=300)
        found = _read_all(Consumer(consumer_config, broker_name=SET_A), "orders")
        _assert_exactly_once(load, found)
        network.heal()
        reads = {name: _get_requests(cluster, name) - count
                 for name, count in reads_before.items()}
        assert reads[master] == 0 and sum(reads.values()) >= QUEUES, reads
    finally:
        _tear_down(cluster, load)


def _read_all(consumer: Consumer, topic: str) -> dict[tuple[int, int], bytes]:
    """Every message of `topic` the consumer can read, by (queue, offset), each queue pulled
    from 0 until it returns nothing more."""
    found: dict[tuple[int, int], bytes] = {}
    for queue_id in range(QUEUES):
        queue_offset = 0
        for _ in range(10_000):  # bounded: each pull moves forward or the loop ends
            result = consumer.pull(topic, queue_id, queue_offset, max_messages=1024)
            offsets = result.table.column("queue_offset").to_pylist()
            bodies = result.table.column("body").to_pylist()
            found.update(((queue_id, o), b) for o, b in zip(offsets, bodies, strict=True))
            if result.next_queue_offset <= queue_offset:
                break
            queue_offset = result.next_queue_offset
    return found


def _get_requests(cluster: FailoverCluster, name: str) -> int:
    stats = Admin(ClientConfig(brokers=(cluster.endpoint(name),), retries_max=3,
                               request_timeout_ms=3000)).action("broker_stats")
    return int(stats["counters"].get("get_requests", 0))

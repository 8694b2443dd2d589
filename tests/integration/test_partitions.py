"""Network partitions across test hosts: what must hold when a machine is cut off, not killed.

Goal (issue 17): a master that is alive but cut off keeps answering the clients that still
reach it, which a SIGKILL never shows. Every scenario runs a real cluster with each controller
and broker on its own test host (`rocketha-cluster up --hosts`, ha/local_hosts.py) and a
producer in the root namespace, which stays reachable from every host.

- master cut off from everything but the producer (nftables rules inside its host, `drop` =
  silence and `reject` = connection refused, which the controller's TCP probe of a lost master
  takes as proof of death): the controller elects a slave of the SyncStateSet; the isolated
  master acknowledges nothing the new master does not hold (its accepted SyncStateSet stays the
  controller's: it never shrinks it alone); heal: it rejoins as a slave, its fork is cut, and
  every acknowledged message is on the new master exactly once, at the offset its ack named,
  with the replicas byte-identical below the confirm position.

With inSyncReplicas=1 (the brokers' default) the master acks alone while its lease holds, and
a cut-off master keeps doing so for the rest of its lease: those acks are lost at the failover.
That variant is kept as xfail(strict) (slow) for the owner of the lease, with the run that
showed it (drop rule; reject gives the same):

    drop: broker-a-2 cut off, broker-a-1 master (epoch 2) 1.56s later; 1372 acks while cut off
    AssertionError: acked 1930, found 568, lost 1362 [111, 112, 113, 114, 115], ...
    offsets ["seq 111 acked at 0/27 holds b'r4d0af5ad:1477'", "seq 112 acked at 3/28 holds
    b'fresh'", ...]

(the cut came after 100 acks: everything acked from then on, on the master alone, was cut with
its fork). A producer that reaches both the controller and the cut-off master stays with the
old master (FLUSH_SLAVE_TIMEOUT every syncFlushTimeout) until the heal: only a new producer
follows the controller to the new master meanwhile (asserted).

Method: FailoverCluster(hosts=True) and its Load (one idempotent producer thread resending
until PUT_OK, history checked with Jepsen's total-queue checks), faults from
FailoverCluster.network. Controller timers are shortened (controllerHeartbeatTimeoutMs=1500).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from connector import Producer
from ha.local_hosts import HostNetwork
from tests.integration.failover_cluster import FailoverCluster, Load, counts, read_topic
from tests.integration.test_controller_failover import (
    QUORUM_AUTO,
    SET_A,
    _assert_exactly_once,
    _assert_rejoined_identical,
    _producer_config,
    _run_id,
    _tear_down,
)

pytestmark = pytest.mark.integration

# a dead master is noticed after 1.5 s; its lease is at most 2/3 of that (ha/master_core.py)
CONTROLLER_FAST = {"controllerHeartbeatTimeoutMs": "1500", "scanNotActiveBrokerIntervalMs": "200",
                   "raftElectionTimeoutTicks": "6"}
QUORUM_ONE = {"inSyncReplicas": "1"}  # the default: a put may be acked on the master alone
ELECTION_DEADLINE_S = 20.0
ACKS_BEFORE = 100  # the load runs at full speed when the cut comes
ACKS_AFTER = 100  # the producer moved on to the new master
PARTITION_HELD_S = 2.0  # the partition outlasts the election by this much
IN_SYNC_ONE_LOSS = (
    "inSyncReplicas=1 acks a put on the master alone while its lease holds: a master cut off "
    "keeps acking for up to masterLeaseMs (capped at 2/3 of controllerHeartbeatTimeoutMs) "
    "after its last heartbeat, none of it reaches a slave, and the slave elected after the "
    "lease lapsed lacks it; the heal truncates the old master's fork and those acks are lost "
    "(1,100-1,700 acks in 0.8 s here). See the report of issue 17.")


def _partitioned_master(tmp_path: Path, *, action: str, quorum: dict[str, str]) -> None:
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
        cluster.wait_confirm_at_end(new)
        _assert_exactly_once(load, read_topic(cluster.endpoint(new), "orders"))
    finally:
        _tear_down(cluster, load)


@pytest.mark.parametrize("action", ["drop", "reject"])
def test_cut_off_master_acknowledges_nothing_it_loses(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path, action: str) -> None:
    _partitioned_master(tmp_path, action=action, quorum=QUORUM_AUTO)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=IN_SYNC_ONE_LOSS)
@pytest.mark.parametrize("action", ["drop", "reject"])
def test_cut_off_master_with_in_sync_replicas_one(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path, action: str) -> None:
    _partitioned_master(tmp_path, action=action, quorum=QUORUM_ONE)

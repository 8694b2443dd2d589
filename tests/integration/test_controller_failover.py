"""Failover in controller mode, with real processes: the safety rules of DESIGN §5 under faults.

Goal: when the master of a replica set is SIGKILLed or SIGSTOPped under load, the controller
elects a new master from the SyncStateSet, producers following the controller get PUT_OK again,
no PUT_OK message is lost, doubled, reordered within its queue or moved from the queue offset
its ack named (§5.1, §5.2, §5.4); the old master comes back as a SLAVE of the new epoch and
its CommitLog equals the new master's up to the confirm position (§5.3, §5.5). Losing the
controller leader, or every controller, never stops the data plane (§5.6), and the replicated
controller state survives a restart of all controllers. With two replica sets, unordered sends
move to the set that is left.

Method: `rocketha-cluster up` with controllers (tests/integration/failover_cluster.py) on
127.0.0.1 in a per-test directory, torn down in `finally`. A producer thread sends keyed,
numbered messages through a controller-configured Producer (bounded in count and time); each
carries an idempotence marker and is sent again until PUT_OK, so "exactly once" is a claim the
broker must keep (it rebuilds the marker table on promotion). After the fault, what the new
master holds is read back with a Consumer and checked against the producer's history
(Jepsen's total-queue: lost / unexpected / duplicated; per-queue order; acked offsets), and
CommitLog segment files are compared byte for byte. Every wait has a deadline.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from connector import ClientConfig, Consumer, Producer
from connector.protocol import RocketHAError
from tests.integration.failover_cluster import (
    QUEUES,
    FailoverCluster,
    Load,
    check_history,
    commitlog_bytes,
    counts,
    epoch_entries,
    read_topic,
)
from tests.ha.replica_set import wait_for

pytestmark = pytest.mark.integration

SET_A = "broker-a"
QUORUM_AUTO = {"inSyncReplicas": "2", "enableAutoInSyncReplicas": "true",
               "minInSyncReplicas": "1"}
QUORUM_ALL_ACK = {**QUORUM_AUTO, "allAckInSyncStateSet": "true"}
# controllerHeartbeatTimeoutMs (3 s, not settable through rocketha-cluster) + scans + take-over
ELECTION_DEADLINE_S = 15.0


def _producer_config(cluster: FailoverCluster) -> ClientConfig:
    return ClientConfig(controller=cluster.controller_addr, request_timeout_ms=3000,
                        send_deadline_ms=10_000, retries_max=60, backoff_max_ms=300)


def _run_id() -> str:
    return "r" + uuid.uuid4().hex[:8]


def _assert_exactly_once(load: Load, found: dict[tuple[int, int], bytes]) -> None:
    verdict = check_history(load, found)
    assert verdict.acked > 0
    assert not verdict.lost, verdict.summary()
    assert not verdict.unexpected, verdict.summary()
    assert not verdict.duplicated, verdict.summary()
    assert not verdict.order_violations, verdict.summary()
    assert not verdict.wrong_offsets, verdict.summary()


def _assert_rejoined_identical(cluster: FailoverCluster, old: str, new: str,
                               new_epoch: int) -> None:
    """`old` follows `new` in `new_epoch`, and their logs agree up to new's confirm position."""
    cluster.wait_slave(old, new_epoch)
    end = cluster.wait_converged(old, new)
    master_info = cluster.info(new)
    assert master_info is not None
    confirm = master_info["confirm_log_position"]
    assert 0 < confirm <= end
    old_epochs, new_epochs = (epoch_entries(cluster.store_dir(n)) for n in (old, new))
    assert old_epochs[-1][0] == new_epoch, old_epochs
    assert old_epochs == new_epochs, (old_epochs, new_epochs)
    assert commitlog_bytes(cluster.store_dir(old), confirm) == \
        commitlog_bytes(cluster.store_dir(new), confirm)


@pytest.mark.parametrize("quorum", [QUORUM_AUTO, QUORUM_ALL_ACK], ids=["auto-isr", "all-ack"])
def test_sigkill_master_under_load(tmp_path: Path, quorum: dict[str, str]) -> None:
    cluster = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, **quorum)
        old, old_info = cluster.wait_master(SET_A)
        before = cluster.wait_full_sync_state_set(old, 3)
        old_epoch = old_info["master_epoch"]
        load = Load(_producer_config(cluster), "orders", _run_id()).start()
        load.wait_acks(300)
        state = cluster.replica_state(SET_A)
        killed_at = time.monotonic()
        cluster.kill(old)

        new, new_info = cluster.wait_master(SET_A, min_epoch=old_epoch + 1, exclude=[old],
                                            timeout_s=ELECTION_DEADLINE_S)
        new_id = new_info["controller"]["broker_id"]
        assert new_id in state["sync_state_set"] and new_id in before, (new_id, state, before)
        new_epoch = new_info["master_epoch"]
        acked_before = len(load.acked)
        load.wait_acks(acked_before + 300, timeout_s=ELECTION_DEADLINE_S)
        first_after = min(a.acked_at for a in load.acks_after(killed_at))
        load.stop()
        print(f"\nkill -> PUT_OK on {new} (epoch {new_epoch}) after "
              f"{first_after - killed_at:.2f}s; outcomes {dict(counts(load))}")

        found = read_topic(cluster.endpoint(new), "orders")
        _assert_exactly_once(load, found)

        cluster.up()  # the old master restarts: a newer epoch names another master
        _assert_rejoined_identical(cluster, old, new, new_epoch)
        info = cluster.info(old)
        assert info is not None and info["role"] == "SLAVE"
        assert cluster.info(new)["master_epoch"] == new_epoch  # no election on the way back
    finally:
        if cluster is not None:
            cluster.down()


@pytest.mark.parametrize("controller_at_sigcont", ["up", "down"])
def test_sigstop_master_past_the_heartbeat_timeout_then_sigcont(
        tmp_path: Path, controller_at_sigcont: str) -> None:
    """With the controller "down" at SIGCONT the old master cannot learn it was deposed, so
    only its SyncStateSet rule (acks count only from members the controller accepted) keeps
    it from acking alone, for as long as the controller stays away."""
    cluster = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, **QUORUM_AUTO)
        old, old_info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3)
        old_epoch = old_info["master_epoch"]
        load = Load(_producer_config(cluster), "orders", _run_id()).start()
        load.wait_acks(200)
        # A producer that knows only the old master, without retries, and a timeout longer
        # than the pause: the put it sends while the master is stopped is answered after
        # SIGCONT, by a master that has not yet heard it was deposed.
        direct = Load(ClientConfig(brokers=(cluster.endpoint(old),), request_timeout_ms=30_000,
                                   send_deadline_ms=30_000, retries_max=0),
                      "orders", _run_id(), resend=False).start()
        direct.wait_acks(20)
        stopped_at = time.monotonic()
        cluster.pause(old)

        new, new_info = cluster.wait_master(SET_A, min_epoch=old_epoch + 1, exclude=[old],
                                            timeout_s=ELECTION_DEADLINE_S)
        new_epoch = new_info["master_epoch"]
        load.wait_acks(len(load.acked) + 200, timeout_s=ELECTION_DEADLINE_S)
        if controller_at_sigcont == "down":
            cluster.kill("controller-n1")
        resumed_at = time.monotonic()
        cluster.resume(old)

        window_s = 0.0 if controller_at_sigcont == "up" else 3.0
        wait_for(lambda: (sum(1 for t, _, _ in direct.outcomes if t > resumed_at) >= 10
                          and time.monotonic() > resumed_at + window_s), 20 + window_s,
                 "the old master to answer the direct producer after SIGCONT")
        direct.stop()
        after_resume = [status for t, _, status in direct.outcomes if t > resumed_at]
        if controller_at_sigcont == "down":
            assert (cluster.info(old) or {}).get("role") == "MASTER"  # still believes it
            cluster.up()
        cluster.wait_slave(old, new_epoch)
        load.wait_acks(len(load.acked) + 100, timeout_s=ELECTION_DEADLINE_S)
        load.stop()
        print(f"\nold master after SIGCONT answered {dict(Counter(after_resume))}; load "
              f"{dict(counts(load))}")

        # Report every broken rule, not only the first one.
        problems = []
        late = [(a.seq, round(a.sent_at - stopped_at, 2)) for a in direct.acks_after(stopped_at)]
        if late:
            problems.append(f"{len(late)} PUT_OK from the deposed master for puts sent after "
                            f"SIGSTOP, e.g. (seq, s after SIGSTOP) {late[:4]}")
        found = read_topic(cluster.endpoint(new), "orders")
        for name, history in (("load", load), ("direct", direct)):
            try:
                _assert_exactly_once(history, found)
            except AssertionError as err:
                problems.append(f"{name}: {str(err).splitlines()[0]}")
        try:
            _assert_rejoined_identical(cluster, old, new, new_epoch)
        except AssertionError as err:
            problems.append(f"rejoin: {str(err).splitlines()[0][:300]}")
        assert not problems, "\n".join(problems)
    finally:
        if cluster is not None:
            cluster.down()

"""Failover in controller mode, with real processes: the safety rules of docs/design.md §5 under
faults.

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
from typing import Any

import pytest

from connector import Admin, ClientConfig, Consumer, Producer
from connector.protocol.errors import RocketHAError
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import (
    FailoverCluster,
    Load,
    Reader,
    check_history,
    commitlog_bytes,
    counts,
    epoch_entries,
    read_topic,
)

pytestmark = pytest.mark.integration

SET_A = "broker-a"
QUORUM_AUTO = {"inSyncReplicas": "2", "enableAutoInSyncReplicas": "true",
               "minInSyncReplicas": "1"}
QUORUM_ALL_ACK = {**QUORUM_AUTO, "allAckInSyncStateSet": "true"}
# controllerHeartbeatTimeoutMs (3 s, not settable through rocketha-cluster) + scans + take-over
ELECTION_DEADLINE_S = 15.0
CONTROLLER_TIMEOUT_S = 3.0  # the controller's default controllerHeartbeatTimeoutMs
CONTROLLER_ELECTION_MAX_S = 5.0  # Raft: 10-20 ticks of 50 ms, plus pre-vote
DEPOSED_WINDOW_S = 3.0  # how long a deposed master without a controller is tried
ACK_GAP_MAX_S = 2.0  # longest pause in PUT_OKs that "writes continue" allows (2 shared cores)


def _producer_config(cluster: FailoverCluster) -> ClientConfig:
    return ClientConfig(controller=cluster.controller_addr, request_timeout_ms=3000,
                        send_deadline_ms=10_000, retries_max=60, backoff_max_ms=300)


def _tear_down(cluster: FailoverCluster | None, *workers: Load | Reader | None) -> None:
    """End the client threads, then every process of the cluster (whatever got started)."""
    for worker in workers:
        if worker is not None:
            worker.abort()
    if cluster is not None:
        cluster.down()


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
    # writes may go on: compare what both held when they had converged
    confirm = min(cluster.info_now(new)["confirm_log_position"], end)
    assert confirm > 0
    old_epochs, new_epochs = (epoch_entries(cluster.store_dir(n)) for n in (old, new))
    assert old_epochs[-1][0] == new_epoch, old_epochs
    assert old_epochs == new_epochs, (old_epochs, new_epochs)
    assert commitlog_bytes(cluster.store_dir(old), confirm) == \
        commitlog_bytes(cluster.store_dir(new), confirm)


@pytest.mark.parametrize("quorum", [
    pytest.param(QUORUM_AUTO, id="auto-isr"),
    # the same failover path with every SyncStateSet member acking: kept out of the default run
    pytest.param(QUORUM_ALL_ACK, id="all-ack", marks=pytest.mark.slow),
])
def test_sigkill_master_under_load(tmp_path: Path, quorum: dict[str, str]) -> None:
    cluster = load = None
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

        # PUT_OK needs inSyncReplicas; reads show what every SyncStateSet member holds: the
        # last acks can be ahead of reads for a moment (not lost: they are on the survivors)
        cluster.wait_confirm_at_end(new)
        found = read_topic(cluster.endpoint(new), "orders")
        _assert_exactly_once(load, found)

        cluster.up()  # the old master restarts: a newer epoch names another master
        _assert_rejoined_identical(cluster, old, new, new_epoch)
        assert cluster.info_now(old)["role"] == "SLAVE"
        assert cluster.info_now(new)["master_epoch"] == new_epoch  # no election on the way back
    finally:
        _tear_down(cluster, load)


@pytest.mark.parametrize("controller_at_sigcont", ["up", "down"])
def test_sigstop_master_past_the_heartbeat_timeout_then_sigcont(
        tmp_path: Path, controller_at_sigcont: str) -> None:
    """With the controller "down" at SIGCONT the old master cannot learn it was deposed, so
    only its SyncStateSet rule (acks count only from members the controller accepted) keeps
    it from acking alone, for as long as the controller stays away."""
    cluster = load = direct = None
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
        # pause() returns once every thread has stopped: a put sent before that may still be
        # acked by the valid master (the CI saw one sent during the pid look-up); none after
        cluster.pause(old)
        stopped_at = time.monotonic()

        new, new_info = cluster.wait_master(SET_A, min_epoch=old_epoch + 1, exclude=[old],
                                            timeout_s=ELECTION_DEADLINE_S)
        new_epoch = new_info["master_epoch"]
        load.wait_acks(len(load.acked) + 200, timeout_s=ELECTION_DEADLINE_S)
        if controller_at_sigcont == "down":
            cluster.kill("controller-n1")
        resumed_at = time.monotonic()
        cluster.resume(old)

        # Controller up: the old master soon answers NOT_MASTER (10 answers). Down: it keeps
        # its role, so the direct producer tries it for DEPOSED_WINDOW_S (a put may then wait
        # syncFlushTimeout before it fails, so a single answer is enough).
        answers, window_s = (10, 0.0) if controller_at_sigcont == "up" else (1, DEPOSED_WINDOW_S)
        wait_for(lambda: (sum(1 for t, _, _ in direct.outcomes if t > resumed_at) >= answers
                          and time.monotonic() > resumed_at + window_s), 20 + window_s,
                 "the old master to answer the direct producer after SIGCONT")
        direct.stop()
        after_resume = [status for t, _, status in direct.outcomes if t > resumed_at]
        old_role = (cluster.info(old) or {}).get("role")
        if controller_at_sigcont == "down":
            cluster.up()
        cluster.wait_slave(old, new_epoch)
        load.wait_acks(len(load.acked) + 100, timeout_s=ELECTION_DEADLINE_S)
        load.stop()
        print(f"\nold master (role {old_role} after the window; new epoch {new_epoch}) answered "
              f"{dict(Counter(after_resume))} after SIGCONT; load {dict(counts(load))}")

        # Report every broken rule, not only the first one.
        problems = []
        late = [(a.seq, round(a.sent_at - stopped_at, 2)) for a in direct.acks_after(stopped_at)]
        if late:
            problems.append(f"{len(late)} PUT_OK from the deposed master for puts sent after "
                            f"SIGSTOP, e.g. (seq, s after SIGSTOP) {late[:4]}")
        cluster.wait_confirm_at_end(new)  # the last acks can be ahead of reads for a moment
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
        _tear_down(cluster, load, direct)


def test_controller_leader_killed_then_all_controllers_then_restarted(tmp_path: Path) -> None:
    cluster = None
    load = reader = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=3, replicas=2, **QUORUM_AUTO)
        master, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 2)
        load = Load(_producer_config(cluster), "orders", _run_id()).start()
        load.wait_acks(100)
        reader = Reader(_producer_config(cluster), "orders").start()
        reader.wait_rows_after(0.0, 50)

        status = cluster.status()
        leaders = [n for n, p in status.items() if p["kind"] == "controller"
                   and p["role"] == "leader"]
        assert len(leaders) == 1, status
        killed_at = time.monotonic()
        cluster.kill(leaders[0])
        new_leader = cluster.wait_controller_leader(exclude=leaders, timeout_s=10)
        election_s = time.monotonic() - killed_at
        status = cluster.status()
        assert status[leaders[0]]["role"] == "DOWN" and status[new_leader]["role"] == "leader"
        assert [n for n, p in status.items() if p["role"] == "leader"] == [new_leader]
        assert election_s < CONTROLLER_ELECTION_MAX_S, election_s
        print(f"\ncontroller leader {leaders[0]} killed -> {new_leader} leads after "
              f"{election_s:.2f}s")
        # A client that knows only the controllers (the dead one listed first) finds the master.
        fresh = Producer(ClientConfig(controller=",".join(
            [cluster.endpoint(leaders[0])] + [cluster.endpoint(n) for n in cluster.controllers
                                              if n != leaders[0]]), request_timeout_ms=3000))
        try:
            assert fresh.send("orders", b"fresh-client").status == "PUT_OK"
        finally:
            fresh.close()
        gaps = [_wait_data_plane(load, reader, killed_at)]
        state = cluster.replica_state(SET_A)

        # Every controller gone (docs/design.md §5.6): the replica set keeps serving as it was.
        before = cluster.info_now(master)["controller"]["heartbeats_failed"]
        all_down_at = time.monotonic()
        for name in cluster.controllers:
            if cluster.pid(name) is not None:
                cluster.kill(name)
        wait_for(lambda: (cluster.info(master) or {}).get("controller", {}).get(
            "heartbeats_failed", 0) >= before + 6, 10, "heartbeats to dead controllers")
        gaps.append(_wait_data_plane(load, reader, all_down_at,
                                     window_s=CONTROLLER_TIMEOUT_S + 1.0))
        info = cluster.info_now(master)
        assert info["role"] == "MASTER"
        assert info["master_epoch"] == state["master_epoch"]
        assert sorted(info["accepted_sync_state_set"]) == sorted(state["sync_state_set"])
        config = ClientConfig(brokers=(cluster.endpoint(master),), request_timeout_ms=3000)
        with Producer(config) as direct:
            assert direct.send("orders", b"no-controller", queue_id=0).status == "PUT_OK"
        assert Consumer(config).pull("orders", 0, 0, max_messages=10).table.num_rows > 0

        # Controllers back: the replicated state is what it was, and stays so past a heartbeat
        # timeout (a fresh leader must not take the master for dead before it heard from it).
        restarted_at = time.monotonic()
        cluster.up()
        cluster.wait_controller_leader(timeout_s=20)
        assert cluster.replica_state(SET_A) == state
        gaps.append(_wait_data_plane(load, reader, restarted_at,
                                     window_s=CONTROLLER_TIMEOUT_S + 1.5))
        print(f"longest PUT_OK pauses: leader killed {gaps[0]:.2f}s, all controllers killed "
              f"{gaps[1]:.2f}s, controllers restarted {gaps[2]:.2f}s")
        assert cluster.replica_state(SET_A) == state
        info = cluster.info_now(master)
        assert info["role"] == "MASTER"
        assert info["controller"]["master_epoch"] == state["master_epoch"]

        load.stop()
        reader.stop()
        cluster.wait_confirm_at_end(master)
        found = read_topic(cluster.endpoint(master), "orders")
        _assert_exactly_once(load, found)
        assert not reader.check_against(found), reader.check_against(found)[:5]
    finally:
        _tear_down(cluster, load, reader)


def _wait_data_plane(load: Load, reader: Reader, since: float, window_s: float = 2.0) -> float:
    """Producing and consuming go on for `window_s` after `since`, without a long pause;
    returns the longest pause in PUT_OKs."""
    wait_for(lambda: time.monotonic() >= since + window_s, window_s + 1, "the window")
    load.wait_acks(len(load.acked) + 20)
    reader.wait_rows_after(since + window_s / 2, 10)
    gap_s = load.max_ack_gap_s(since, since + window_s)
    assert gap_s < ACK_GAP_MAX_S, f"no ack for {gap_s:.2f}s after t={since:.1f}"
    return gap_s


def test_two_replica_sets_one_lost_unordered_sends_move_to_the_other(tmp_path: Path) -> None:
    cluster = None
    spread = keyed = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replica_sets=2,
                                  replicas=2, **QUORUM_AUTO)
        master_a, _ = cluster.wait_master("broker-a")
        master_b, info_b = cluster.wait_master("broker-b")
        cluster.wait_full_sync_state_set(master_a, 2)
        cluster.wait_full_sync_state_set(master_b, 2)
        # Unordered sends (no key, no queue): the controller-configured producer may use any
        # set's master. A keyed producer that knows only set b's master watches b's service.
        spread = Load(_producer_config(cluster), "spread", _run_id(), keys=0, idempotent=False,
                      resend=False).start()
        keyed = Load(ClientConfig(brokers=(cluster.endpoint(master_b),), request_timeout_ms=3000,
                                  send_deadline_ms=10_000), "orders", _run_id()).start()
        spread.wait_acks(100)
        keyed.wait_acks(100)

        killed_at = time.monotonic()
        for name in cluster.members("broker-a"):
            cluster.kill(name)
        dead_at = time.monotonic()
        spread.wait_acks(len(spread.acked) + 200, timeout_s=ELECTION_DEADLINE_S)
        keyed.wait_acks(len(keyed.acked) + 100)
        moved_s = min(a.acked_at for a in spread.acks_after(dead_at)) - killed_at
        gap_s = keyed.max_ack_gap_s(killed_at, time.monotonic())
        spread.stop()
        keyed.stop()
        print(f"\nset a killed: unordered sends PUT_OK on b after {moved_s:.2f}s; set b's "
              f"longest pause {gap_s:.2f}s; spread {dict(counts(spread))}")
        assert gap_s < ACK_GAP_MAX_S, f"set b paused {gap_s:.2f}s while set a died"
        still = cluster.master_now("broker-b")
        assert still is not None and still[0] == master_b
        assert still[1]["master_epoch"] == info_b["master_epoch"]
        cluster.wait_confirm_at_end(master_b)
        on_b = read_topic(cluster.endpoint(master_b), "spread")
        after = check_history(spread, on_b)
        assert not after.unexpected and not after.order_violations, after.summary()
        moved = [a.seq for a in spread.acks_after(dead_at)]
        assert moved and not set(moved) & set(after.lost), after.summary()
        _assert_exactly_once(keyed, read_topic(cluster.endpoint(master_b), "orders"))

        # Set a back from a whole-set crash: every PUT_OK is on a or b, where its ack said.
        cluster.up()
        master_a2, _ = cluster.wait_master("broker-a", timeout_s=ELECTION_DEADLINE_S)
        on_a = read_topic(cluster.endpoint(master_a2), "spread")
        before = check_history(spread, on_a)
        assert not before.unexpected and not before.order_violations, before.summary()
        assert before.found > 0, "the unordered producer never used set a: nothing moved"
        misplaced = [a.seq for a in spread.acked.values()
                     if spread.body(a.seq) not in (on_a.get((a.queue_id, a.queue_offset)),
                                                   on_b.get((a.queue_id, a.queue_offset)))]
        assert not misplaced, (f"{len(misplaced)} PUT_OK not at their queue offset on either "
                               f"set: {misplaced[:5]}; a: {before.summary()}; "
                               f"b: {after.summary()}")
    finally:
        _tear_down(cluster, spread, keyed)


def test_a_consumer_reads_on_from_a_slave_while_the_set_has_no_master(tmp_path: Path) -> None:
    """Clients: consumers keep reading from slaves during a failover. With the controller
    down no election can happen, so once its master is killed the set stays masterless; a
    consumer that was told only the controller reads on from a slave (up to the slave's
    confirm position), and reads the master's new writes once everything is back."""
    cluster = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3,
                                  **QUORUM_ALL_ACK, slaveReadEnable="true")
        master, _ = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 3)
        config = _producer_config(cluster)
        bodies = [b"m%03d" % i for i in range(200)]
        with Producer(config) as producer:
            for body in bodies:
                assert producer.send("orders", body, queue_id=0).status == "PUT_OK"
        for slave in (n for n in cluster.members(SET_A) if n != master):
            wait_for(lambda s=slave: _confirmed(cluster.endpoint(s), "orders", 0) >= 200, 10,
                     f"{slave} to confirm the 200 messages")
        consumer = Consumer(config)
        first = consumer.pull("orders", 0, 0, max_messages=100)
        assert first.table.column("body").to_pylist() == bodies[:100]

        for controller in cluster.controllers:
            cluster.kill(controller)
        cluster.kill(master)  # no master, and no controller to elect one
        rest = consumer.pull("orders", 0, 100, max_messages=100)
        assert rest.table.column("body").to_pylist() == bodies[100:]
        assert consumer.endpoint != cluster.endpoint(master)
        beyond = consumer.pull("orders", 0, 200, max_messages=10)
        assert beyond.table.num_rows == 0  # nothing past the slave's confirm position

        cluster.up()  # controller and old master back: the set takes writes again
        current, _ = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(current, 3)  # allAck: every member must be back
        with Producer(config) as producer:
            assert producer.send("orders", b"after", queue_id=0).status == "PUT_OK"
        wait_for(lambda: consumer.pull("orders", 0, 200, max_messages=10)
                 .table.column("body").to_pylist() == [b"after"], 20,
                 "the consumer to read the write made after the failover")
    finally:
        _tear_down(cluster)


def _confirmed(endpoint: str, topic: str, queue_id: int) -> int:
    """The queue's max offset a reader of `endpoint` may see (0 while it does not answer)."""
    try:
        queues = Admin(ClientConfig(brokers=(endpoint,), retries_max=0,
                                    request_timeout_ms=2000)).queue_offsets(topic)
    except RocketHAError:
        return 0
    return next((q["max_queue_offset"] for q in queues if q["queue_id"] == queue_id), 0)


def test_a_master_restarted_within_the_heartbeat_timeout_takes_a_new_epoch(
        tmp_path: Path) -> None:
    """Cluster simulation seed 275, with real processes: a master killed and restarted before
    the controller times it out is still named master of its epoch. Its previous process may
    have shipped an unsynced tail it lost; continuing that epoch would write other bytes at
    the same positions under the same epoch (no fork point: replicas differ below confirm). It
    must refuse the old epoch and get a new one at once (not after the heartbeat timeout).
    The slaves are SIGSTOPped meanwhile, so no lost-master report and probe elects around it."""
    cluster = load = after = None
    timeout_s = 30.0  # controllerHeartbeatTimeoutMs: nothing here may wait for it
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3,
                                  controller_settings={
                                      "controllerHeartbeatTimeoutMs": str(int(timeout_s * 1000))},
                                  **QUORUM_AUTO)
        old, old_info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3)
        old_epoch = old_info["master_epoch"]
        load = Load(_producer_config(cluster), "orders", _run_id()).start()
        load.wait_acks(200)
        load.stop()
        slaves = [name for name in cluster.members(SET_A) if name != old]
        for name in slaves:
            cluster.pause(name)
        restarted_at = time.monotonic()
        cluster.kill(old)
        cluster.start(old)
        # fenced until the controller elects again: never master of the old epoch
        def named_master() -> dict[str, Any] | None:
            info = cluster.info(old)
            named = info and (info.get("controller") or {}).get("applied_role") == "master"
            return info if named else None
        info = wait_for(named_master, 20, f"{old} to learn its role after the restart")
        assert info["role"] != "MASTER" or info["master_epoch"] > old_epoch, info
        for name in slaves:
            cluster.resume(name)
        new, new_info = cluster.wait_master(SET_A, min_epoch=old_epoch + 1,
                                            timeout_s=ELECTION_DEADLINE_S)
        assert time.monotonic() - restarted_at < timeout_s, "elected only after the timeout"
        new_epoch = new_info["master_epoch"]
        print(f"\n{old} restarted as master of epoch {old_epoch}; {new} became master of "
              f"epoch {new_epoch} {time.monotonic() - restarted_at:.1f} s after the kill")
        after = Load(_producer_config(cluster), "orders", _run_id()).start()
        after.wait_acks(100, timeout_s=ELECTION_DEADLINE_S)
        after.stop()
        for name in cluster.members(SET_A):
            if name != new:
                _assert_rejoined_identical(cluster, name, new, new_epoch)
        epochs = [epoch for epoch, _ in epoch_entries(cluster.store_dir(old))]
        assert epochs.count(old_epoch) == 1 and epochs == sorted(set(epochs)), epochs
        cluster.wait_confirm_at_end(new)
        found = read_topic(cluster.endpoint(new), "orders")
        _assert_exactly_once(load, found)
        _assert_exactly_once(after, found)
    finally:
        _tear_down(cluster, load, after)

"""A master paused (SIGSTOP) past its replacement and resumed acknowledges nothing it loses.

Goal (issue 15, docs/design.md §5.7): in the fault run that found it, a master stopped for 6 s
while a
slave was elected in its place answered `PUT_OK` to the puts it took in the milliseconds after
SIGCONT, before it heard it was deposed; its log was then cut as a fork of the new master's,
and the new master stored other messages at the acknowledged (queue, offset) pairs. Every
acknowledged message must be readable afterwards, at the position its ack named, under the
cluster tool's default quorum (a majority, with degradation) and with every member acking.
(With `inSyncReplicas=1` a `PUT_OK` is on the master alone until the slaves fetch it: a pause
in that window loses it by the rule, as a crash would; the fault run, `build.py faults
--in-sync 1`, counts those apart.) And the producer must not wait out the pause: an
idempotent, controller-configured producer leaves a master the controller has replaced
(connector/client/master_watch.py), so its puts go on on the new master before SIGCONT.

Method: `rocketha-cluster up` with controllers (tests/integration/failover_cluster.py), a
producer thread sending numbered, keyed messages with idempotence markers through the
controller's routes (resent until PUT_OK), and cycles of: SIGSTOP the master, wait until the
controller has elected another one (past controllerHeartbeatTimeoutMs, shortened to 1.5 s as
in test_partitions.py), let the producer reach the new master, SIGCONT the old one, wait until
it follows as a SLAVE. The history is then checked against the final master (Jepsen's
total-queue checks and the acked offsets). The `slow` variant runs many cycles with three
controllers (`python3 build.py test -m slow -k paused`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from connector import ClientConfig, Producer
from tests.integration.failover_cluster import FailoverCluster, Load, counts, read_topic
from tests.integration.test_controller_failover import (
    CONTROLLER_TIMEOUT_S,
    ELECTION_DEADLINE_S,
    QUORUM_ALL_ACK,
    SET_A,
    _assert_exactly_once,
    _producer_config,
    _run_id,
    _tear_down,
)
from tests.integration.test_partitions import CONTROLLER_FAST

pytestmark = pytest.mark.integration

QUORUM_DEFAULT: dict[str, str] = {}  # rocketha-cluster's: a majority, with degradation
ACKS_BEFORE_PAUSE = 50  # the load is running at full speed when the master stops
ACKS_ON_NEW_MASTER = 50  # the producer moved before SIGCONT: the old master gets fresh puts too


def _pause_cycles(tmp_path: Path, quorum: dict[str, str], *, controllers: int,
                  cycles: int) -> None:
    cluster = load = None
    try:
        # the election is waited for, not timed: a dead master noticed after 1.5 s, not 3
        cluster = FailoverCluster(tmp_path / "cluster", controllers=controllers, replicas=3,
                                  controller_settings=CONTROLLER_FAST, **quorum)
        master, info = cluster.wait_master(SET_A)
        load = Load(_producer_config(cluster), "orders", _run_id(), messages_max=1_000_000,
                    duration_max_s=cycles * 60.0).start()
        for cycle in range(cycles):
            cluster.wait_full_sync_state_set(master, 3, timeout_s=ELECTION_DEADLINE_S)
            load.wait_acks(len(load.acked) + ACKS_BEFORE_PAUSE)
            epoch = info["master_epoch"]
            cluster.pause(master)
            new, info = cluster.wait_master(SET_A, min_epoch=epoch + 1, exclude=[master],
                                            timeout_s=ELECTION_DEADLINE_S)
            load.wait_acks(len(load.acked) + ACKS_ON_NEW_MASTER, timeout_s=ELECTION_DEADLINE_S)
            resumed_at = time.monotonic()
            cluster.resume(master)
            cluster.wait_slave(master, info["master_epoch"])
            print(f"cycle {cycle}: {master} paused, {new} master of epoch "
                  f"{info['master_epoch']}, {len(load.acks_after(resumed_at))} acks since SIGCONT")
            master = new
        load.wait_acks(len(load.acked) + ACKS_BEFORE_PAUSE)
        load.stop()
        print(f"load: {dict(counts(load))}")
        cluster.wait_confirm_at_end(master)
        _assert_exactly_once(load, read_topic(cluster.endpoint(master), "orders"))
    finally:
        _tear_down(cluster, load)


@pytest.mark.parametrize("quorum", [pytest.param(QUORUM_DEFAULT, id="default-quorum"),
                                    pytest.param(QUORUM_ALL_ACK, id="all-ack")])
def test_a_resumed_master_loses_no_acknowledged_message(tmp_path: Path,
                                                        quorum: dict[str, str]) -> None:
    _pause_cycles(tmp_path, quorum, controllers=1, cycles=3)


@pytest.mark.slow
@pytest.mark.parametrize("quorum", [pytest.param(QUORUM_DEFAULT, id="default-quorum"),
                                    pytest.param(QUORUM_ALL_ACK, id="all-ack")])
def test_many_pauses_lose_no_acknowledged_message(tmp_path: Path,
                                                  quorum: dict[str, str]) -> None:
    _pause_cycles(tmp_path, quorum, controllers=3, cycles=20)


PAUSE_S = CONTROLLER_TIMEOUT_S + 4.0  # long past the election: the producer must not wait it out
MOVE_DEADLINE_S = CONTROLLER_TIMEOUT_S + 2.0  # measured ~3.1 s; the goal is timeout + 1 s
SENDS_MAX = 200_000  # the sender's loop bound


def test_an_idempotent_producer_leaves_a_paused_master_once_it_is_replaced(
        tmp_path: Path) -> None:
    """A put stuck on a paused master is sent to the new master, long before SIGCONT.

    The request timeout (30 s) is far longer than the pause, so without the master watch the
    producer would answer only after SIGCONT. Every PUT_OK is checked on the final master."""
    cluster = None
    stop = threading.Event()
    acks: list[tuple[float, float, int, int, bytes]] = []  # (sent, acked, queue, offset, body)
    errors: list[BaseException] = []
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3)
        master, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 3, timeout_s=ELECTION_DEADLINE_S)
        config = ClientConfig(controller=cluster.controller_addr, request_timeout_ms=30_000,
                              send_deadline_ms=60_000)

        def send() -> None:
            try:
                with Producer(config, idempotent=True) as producer:
                    for seq in range(SENDS_MAX):
                        if stop.is_set():
                            return
                        body = b"p:%d" % seq
                        sent = time.monotonic()
                        result = producer.send("paused", body)
                        if result.status == "PUT_OK":  # with its position, a retry's too
                            acks.append((sent, time.monotonic(), result.queue_id,
                                         result.queue_offset, body))
            except Exception as err:  # noqa: BLE001 - reported below
                errors.append(err)

        sender = threading.Thread(target=send, name="paused-sender", daemon=True)
        sender.start()
        wait_for_acks = time.monotonic() + ELECTION_DEADLINE_S
        while len(acks) < ACKS_BEFORE_PAUSE and time.monotonic() < wait_for_acks:
            time.sleep(0.05)
        assert len(acks) >= ACKS_BEFORE_PAUSE, f"no load before the pause: {errors}"
        paused_at = time.monotonic()
        cluster.pause(master)
        stopped_at = time.monotonic()  # every thread of the old master has stopped
        new, new_info = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1,
                                            exclude=[master], timeout_s=ELECTION_DEADLINE_S)
        time.sleep(max(0.0, paused_at + PAUSE_S - time.monotonic()))
        resumed_at = time.monotonic()
        # a send begun after the old master stopped can only be answered by the new one
        moved = [ack for ack in acks if ack[0] > stopped_at and ack[1] < resumed_at]
        cluster.resume(master)
        assert moved, (f"no PUT_OK between the pause and SIGCONT ({PAUSE_S:.0f} s): the "
                       f"producer waited out the paused master")
        first_s = moved[0][1] - paused_at
        print(f"first PUT_OK {first_s:.2f} s after SIGSTOP (election by {new})")
        assert first_s <= MOVE_DEADLINE_S
        cluster.wait_slave(master, new_info["master_epoch"])
        stop.set()
        sender.join(timeout=60)
        assert not errors, errors
        final, _ = cluster.wait_master(SET_A)
        cluster.wait_confirm_at_end(final)
        found = read_topic(cluster.endpoint(final), "paused")
        stored = Counter(found.values())
        lost = [ack for ack in acks if found.get((ack[2], ack[3])) != ack[4]]  # -1: lost
        assert not lost, f"{len(lost)} of {len(acks)} acknowledged messages lost: {lost[:5]}"
        doubled = [body for body, count in stored.items() if count > 1]
        assert not doubled, f"stored twice: {doubled[:5]}"
    finally:
        stop.set()
        if cluster is not None:
            cluster.down()  # SIGCONT first

"""A master paused (SIGSTOP) past its replacement and resumed acknowledges nothing it loses.

Goal (issue 15, DESIGN §5.7): in the fault run that found it, a master stopped for 6 s while a
slave was elected in its place answered `PUT_OK` to the puts it took in the milliseconds after
SIGCONT, before it heard it was deposed; its log was then cut as a fork of the new master's,
and the new master stored other messages at the acknowledged (queue, offset) pairs. Every
acknowledged message must be readable afterwards, at the position its ack named, whatever the
quorum setting (`inSyncReplicas=1`, the default, acks on the master alone; 2 with degradation).

Method: `rocketha-cluster up` with controllers (tests/integration/failover_cluster.py), a
producer thread sending numbered, keyed messages with idempotence markers through the
controller's routes (resent until PUT_OK), and cycles of: SIGSTOP the master, wait until the
controller has elected another one (past controllerHeartbeatTimeoutMs), let the producer reach
the new master, SIGCONT the old one, wait until it follows as a SLAVE. The history is then
checked against the final master (Jepsen's total-queue checks and the acked offsets). The
`slow` variant runs many cycles with three controllers (`python3 build.py test -m slow -k
paused`).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.failover_cluster import FailoverCluster, Load, counts, read_topic
from tests.integration.test_controller_failover import (
    ELECTION_DEADLINE_S,
    QUORUM_AUTO,
    SET_A,
    _assert_exactly_once,
    _producer_config,
    _run_id,
    _tear_down,
)

pytestmark = pytest.mark.integration

QUORUM_ONE = {"inSyncReplicas": "1"}  # the default: a put is acked on the master alone
ACKS_BEFORE_PAUSE = 50  # the load is running at full speed when the master stops
ACKS_ON_NEW_MASTER = 50  # the producer moved before SIGCONT: the old master gets fresh puts too


def _pause_cycles(tmp_path: Path, quorum: dict[str, str], *, controllers: int,
                  cycles: int) -> None:
    cluster = load = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=controllers, replicas=3,
                                  **quorum)
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


@pytest.mark.parametrize("quorum", [pytest.param(QUORUM_ONE, id="in-sync-1"),
                                    pytest.param(QUORUM_AUTO, id="in-sync-2-auto")])
def test_a_resumed_master_loses_no_acknowledged_message(tmp_path: Path,
                                                        quorum: dict[str, str]) -> None:
    _pause_cycles(tmp_path, quorum, controllers=1, cycles=3)


@pytest.mark.slow
@pytest.mark.parametrize("quorum", [pytest.param(QUORUM_ONE, id="in-sync-1"),
                                    pytest.param(QUORUM_AUTO, id="in-sync-2-auto")])
def test_many_pauses_lose_no_acknowledged_message(tmp_path: Path,
                                                  quorum: dict[str, str]) -> None:
    _pause_cycles(tmp_path, quorum, controllers=3, cycles=20)

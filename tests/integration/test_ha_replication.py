"""Replica sets of real broker processes: which replicas hold an acked put, per configuration.

Method: `rocketha-cluster up --replicas R` with quorum keys through `--set` (tests/ha/
replica_set.py), raw produce batches without client retries (so every status is seen), reads
from each replica (slaveReadEnable=true), and after `down` a byte comparison of every CommitLog
up to the master's confirm position. A stopped slave (SIGSTOP) shows which replicas an ack
needed: whatever was acked while it was stopped must already be on the others.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from pyarrow import flight

from connector.client import Admin, ClientConfig
from tests.ha.replica_set import ReplicaSet, wait_for

pytestmark = pytest.mark.integration

QUEUES = 4


def produce(replicas: ReplicaSet, topic: str, batches: int, prefix: bytes,
            acked: dict[tuple[int, int], bytes], rows: int = 50) -> list[str]:
    statuses = []
    for batch in range(batches):
        bodies = [b"%s-%d-%d-" % (prefix, batch, row) + b"x" * 64 for row in range(rows)]
        reply = replicas.put(topic, bodies)
        statuses.append(reply["status"])
        if reply["status"] == "PUT_OK":
            acked.update(zip(map(tuple, reply["offsets"]), bodies, strict=True))
    return statuses


@pytest.fixture
def make_set(tmp_path: Path):
    made: list[ReplicaSet] = []

    def make(replicas: int, **settings: str) -> ReplicaSet:
        replica_set = ReplicaSet(tmp_path / f"set{len(made)}", replicas,
                                 defaultTopicQueueNums=str(QUEUES), **settings)
        made.append(replica_set)
        return replica_set

    yield make
    for replica_set in made:
        replica_set.down()


def test_two_replicas_in_sync_two(make_set) -> None:
    replicas = make_set(2, inSyncReplicas="2")
    replicas.wait_sync_state_set([0, 1])
    acked: dict[tuple[int, int], bytes] = {}
    assert set(produce(replicas, "T2", 20, b"a", acked)) == {"PUT_OK"}
    with pytest.raises(flight.FlightError, match=r"NOT_MASTER.*SLAVE.*master is 127\.0\.0\.1:"):
        replicas.put("T2", [b"to-slave"], index=1)
    # Metadata flows to the slave: the topic and a consumer group's offset.
    Admin(ClientConfig(brokers=(replicas.endpoints[0],))).commit_offset("g1", "T2", 1, 7)
    slave_admin = Admin(ClientConfig(brokers=(replicas.endpoints[1],), retries_max=0))
    wait_for(lambda: slave_admin.query_offsets("g1", "T2") == {1: 7}, 10, "offsets on slave")
    assert slave_admin.get_topic("T2")["write_queue_nums"] == QUEUES
    info = replicas.info(0)
    assert info["need_ack_nums"] == 2 and info["broker_role"] == "SYNC_MASTER"
    assert [s["acked_log_position"] for s in info["slaves"]] == [info["max_log_position"]]
    slave_info = replicas.info(1)
    assert slave_info["role"] == "SLAVE" and slave_info["master_epoch"] == info["master_epoch"]
    replicas.check_acked_readable(acked, [0, 1], "T2", QUEUES)
    replicas.down()
    assert replicas.check_logs_identical([0, 1]) > 0


def test_three_replicas_in_sync_two_with_a_slave_stopped(make_set) -> None:
    replicas = make_set(3, inSyncReplicas="2")
    replicas.wait_sync_state_set([0, 1, 2])
    acked: dict[tuple[int, int], bytes] = {}
    assert set(produce(replicas, "T3", 5, b"a", acked)) == {"PUT_OK"}
    replicas.signal(2, signal.SIGSTOP)
    stopped_acked: dict[tuple[int, int], bytes] = {}
    assert set(produce(replicas, "T3", 10, b"b", stopped_acked)) == {"PUT_OK"}
    # Acked while broker 2 was frozen: the master and broker 1 must hold it. Readers see it
    # once broker 2 has left the SyncStateSet (the confirm position waits for every member).
    replicas.wait_sync_state_set([0, 1])
    replicas.check_acked_readable({**acked, **stopped_acked}, [0, 1], "T3", QUEUES)
    replicas.signal(2, signal.SIGCONT)
    replicas.wait_sync_state_set([0, 1, 2])
    assert set(produce(replicas, "T3", 5, b"c", acked)) == {"PUT_OK"}
    replicas.check_acked_readable({**acked, **stopped_acked}, [0, 1, 2], "T3", QUEUES)
    replicas.down()
    replicas.check_logs_identical([0, 1, 2])


def test_async_master_acks_without_slaves_and_says_so(make_set) -> None:
    replicas = make_set(2, brokerRole="ASYNC_MASTER", inSyncReplicas="2")
    replicas.wait_sync_state_set([0, 1])
    replicas.signal(1, signal.SIGSTOP)
    acked: dict[tuple[int, int], bytes] = {}
    reply = replicas.put("TA", [b"first"])
    assert reply["status"] == "PUT_OK" and reply["replication"] == "ASYNC_MASTER"
    acked.update(zip(map(tuple, reply["offsets"]), [b"first"], strict=True))
    assert set(produce(replicas, "TA", 10, b"a", acked)) == {"PUT_OK"}
    replicas.signal(1, signal.SIGCONT)
    replicas.wait_sync_state_set([0, 1])
    master_end = replicas.info(0)["max_log_position"]
    wait_for(lambda: replicas.info(1)["confirm_log_position"] == master_end, 10,
             "the slave to catch up and confirm")
    replicas.check_acked_readable(acked, [0, 1], "TA", QUEUES)
    replicas.down()
    replicas.check_logs_identical([0, 1])


@pytest.mark.slow
def test_four_replicas_in_sync_three(make_set) -> None:
    replicas = make_set(4, inSyncReplicas="3")
    replicas.wait_sync_state_set([0, 1, 2, 3])
    acked: dict[tuple[int, int], bytes] = {}
    assert set(produce(replicas, "T4", 5, b"a", acked)) == {"PUT_OK"}
    replicas.signal(3, signal.SIGSTOP)
    assert set(produce(replicas, "T4", 5, b"b", acked)) == {"PUT_OK"}
    replicas.wait_sync_state_set([0, 1, 2])
    replicas.check_acked_readable(acked, [0, 1, 2], "T4", QUEUES)  # 3 of 4 hold every ack
    replicas.signal(2, signal.SIGSTOP)  # two slaves frozen: 2 replicas < inSyncReplicas=3
    statuses = produce(replicas, "T4", 3, b"c", acked)
    assert set(statuses) <= {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE",
                             "IN_SYNC_REPLICAS_NOT_ENOUGH"}, statuses
    for index in (2, 3):
        replicas.signal(index, signal.SIGCONT)
    replicas.wait_sync_state_set([0, 1, 2, 3])
    assert set(produce(replicas, "T4", 5, b"d", acked)) == {"PUT_OK"}
    replicas.check_acked_readable(acked, [0, 1, 2, 3], "T4", QUEUES)
    replicas.down()
    replicas.check_logs_identical([0, 1, 2, 3])

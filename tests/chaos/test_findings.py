"""Deterministic replays of what chaos campaigns found (a finding not fixed yet is a strict
xfail, which turns into a failure, XPASS, the day it is fixed, so the marker goes with the fix).

Finding 1 (every campaign with master faults; fixed): a consumer group's committed offset moved
backwards after a failover. A master answered `commit_offset` once the offset was in its own
consumerOffset.json; slaves got the offsets with the topics, at most every
haMetadataSyncInterval, so a slave elected before the next sync served older offsets, and a
cut-off master kept accepting commits the new master never saw (seed 7: 55 regressions over one
isolate-master partition). Now a commit is a record in the replica set's CommitLog, answered
only once PUT_OK (ha/broker/offset_log.py). Replays, with the metadata synced once at start
only (haMetadataSyncInterval 10 min) so it cannot carry an offset: (1) one commit on the
master, the master killed, the new master asked; (2) a commit sent to a SIGSTOPped master,
answered after a new master took over and the old one resumed: it must not be OK, or if it
is, the new master must have it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connector import Admin, ClientConfig, Consumer, Producer
from connector.protocol import RocketHAError
from tests.integration.failover_cluster import FailoverCluster
from tests.integration.test_controller_failover import QUORUM_AUTO, SET_A
from tests.integration.test_partitions import CONTROLLER_FAST

pytestmark = pytest.mark.integration


def test_committed_offset_survives_a_failover(tmp_path: Path) -> None:
    with _metadata_synced_once(tmp_path) as (cluster, old, info):
        admin = Admin(ClientConfig(brokers=(cluster.endpoint(old),), retries_max=3))
        admin.create_topic("orders", queues=1)
        admin.commit_offset("billing", "orders", 0, 7)
        assert admin.query_offsets("billing", "orders") == {0: 7}
        cluster.kill(old)
        new, _ = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1, exclude=[old])
        offsets = Admin(ClientConfig(brokers=(cluster.endpoint(new),), retries_max=3)
                        ).query_offsets("billing", "orders")
        assert offsets == {0: 7}, f"the acknowledged commit moved back: {offsets}"


def test_a_paused_master_acknowledges_no_commit_the_new_master_lacks(tmp_path: Path) -> None:
    with _metadata_synced_once(tmp_path) as (cluster, old, info):
        admin = Admin(ClientConfig(brokers=(cluster.endpoint(old),), retries_max=0,
                                   request_timeout_ms=60_000, send_deadline_ms=60_000))
        admin.create_topic("orders", queues=1)
        admin.commit_offset("billing", "orders", 0, 7)
        outcome, new = _answer_after_failover(
            cluster, old, info, lambda: admin.commit_offset("billing", "orders", 0, 9))
        offsets = Admin(ClientConfig(brokers=(cluster.endpoint(new),), retries_max=3)
                        ).query_offsets("billing", "orders")
        print(f"the resumed master answered {outcome!r}; the new master has {offsets}")
        if outcome == "OK":
            assert offsets == {0: 9}, f"the old master acked 9, the new master has {offsets}"
        else:
            assert offsets in ({0: 7}, {0: 9}), f"the acknowledged 7 moved back: {offsets}"


def test_a_created_topic_survives_a_failover(tmp_path: Path) -> None:
    """Finding 3 (read in the code while fixing finding 1; fixed): topic configs travelled as
    HA metadata, so a topic whose create_topic was answered OK was unknown to a slave elected
    before the next sync (produce then auto-created it with the default queue count, or failed
    TOPIC_NOT_EXIST), and a deleted topic came back. Now every topic change is a record in the
    CommitLog, answered only on PUT_OK (ha/broker/topic_log.py). Replay: metadata synced at
    start only; a topic created with 3 queues, one updated, one deleted, one auto-created by a
    first put; the master killed; the new master asked."""
    with _metadata_synced_once(tmp_path) as (cluster, old, info):
        admin = Admin(ClientConfig(brokers=(cluster.endpoint(old),), retries_max=3))
        admin.create_topic("invoices", queues=3)
        admin.create_topic("refunds", queues=1)
        admin.update_topic("refunds", read_queue_nums=2, write_queue_nums=2, perm=4)
        admin.create_topic("drafts", queues=1)
        admin.delete_topic("drafts")
        with Producer(ClientConfig(brokers=(cluster.endpoint(old),), retries_max=3)) as producer:
            assert producer.send("receipts", b"first", queue_id=0).status == "PUT_OK"
        cluster.kill(old)
        new, _ = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1, exclude=[old])
        topics = {topic["name"]: topic for topic in Admin(ClientConfig(
            brokers=(cluster.endpoint(new),), retries_max=3)).list_topics()}
        assert set(topics) == {"invoices", "refunds", "receipts"}, topics
        assert topics["invoices"]["read_queue_nums"] == 3, topics
        assert (topics["refunds"]["write_queue_nums"], topics["refunds"]["perm"]) == (2, 4)
        pulled = Consumer(ClientConfig(brokers=(cluster.endpoint(new),), retries_max=3)
                          ).pull("receipts", 0, 0, max_messages=10)
        assert pulled.table.column("body").to_pylist() == [b"first"]


def test_a_paused_master_acknowledges_no_topic_the_new_master_lacks(tmp_path: Path) -> None:
    """A create_topic sent to a SIGSTOPped master, answered after a new master took over and
    the old one resumed: it must not be OK, or if it is, the new master must have the topic."""
    with _metadata_synced_once(tmp_path) as (cluster, old, info):
        admin = Admin(ClientConfig(brokers=(cluster.endpoint(old),), retries_max=0,
                                   request_timeout_ms=60_000, send_deadline_ms=60_000))
        admin.create_topic("orders", queues=1)
        outcome, new = _answer_after_failover(
            cluster, old, info, lambda: admin.create_topic("late", queues=5))
        names = {topic["name"]: topic for topic in Admin(ClientConfig(
            brokers=(cluster.endpoint(new),), retries_max=3)).list_topics()}
        print(f"the resumed master answered {outcome!r}; the new master has {sorted(names)}")
        assert "orders" in names, f"the acknowledged create of orders is gone: {names}"
        if outcome == "OK":
            assert names.get("late", {}).get("read_queue_nums") == 5, \
                f"the old master acked topic late, the new master has {names}"


@contextlib.contextmanager
def _metadata_synced_once(tmp_path: Path
                          ) -> Iterator[tuple[FailoverCluster, str, dict[str, Any]]]:
    """3 brokers whose HA metadata is synced at start only (haMetadataSyncInterval 10 min, so
    it cannot carry a change), 1 controller: (the cluster, its master, the master's info) once
    every broker is in the SyncStateSet; down at the end."""
    cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3,
                              controller_settings=CONTROLLER_FAST,
                              haMetadataSyncInterval="600000", **QUORUM_AUTO)
    try:
        old, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3)
        yield cluster, old, info
    finally:
        cluster.down()


def _answer_after_failover(cluster: FailoverCluster, old: str, info: dict[str, Any],
                           call: Callable[[], object]) -> tuple[object, str]:
    """SIGSTOP the master `old`, send `call` (it waits in the paused master's socket), let a
    new master take over, SIGCONT the old one: ("OK" or the error it answered, the new
    master)."""
    cluster.pause(old)
    outcome: list[object] = []

    def late_call() -> None:
        try:
            call()
            outcome.append("OK")
        except RocketHAError as err:
            outcome.append(err)

    caller = threading.Thread(target=late_call, daemon=True)
    caller.start()
    new, _ = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1, exclude=[old])
    cluster.resume(old)
    caller.join(timeout=90)
    assert outcome, "the resumed master never answered"
    return outcome[0], new

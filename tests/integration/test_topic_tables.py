"""Topic tables with real processes (issue 38): one replica set of 3 in controller mode, a
file:// tier in the test's directory, a topic created with `table=delta`.

Goal: the Delta table under `<tier>/tables/<topic>` holds every acknowledged message exactly
once, with each queue's offsets contiguous from 0 and each row the message the replica set
holds at that (queue, offset), also when the master is SIGKILLed while it is materializing
(right after one of its commits, while the next is being read or written): the new master
continues from the table's app transactions and fences the deposed epoch. Deleting the topic
leaves its table; `topic delete --delete-table` removes it.

Method: tests/integration/failover_cluster.py's cluster and producer load (idempotent, keyed,
resent until PUT_OK); the table is read with `deltalake` once its per-queue transactions reach
the master's confirmed end offsets (a condition with a deadline, never a sleep).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from connector import Admin, ClientConfig
from ha.broker.table_crash import CRASH_TRIGGER_ENV
from ha.broker.table_plan import fence_app_id, queue_app_id, split_fence
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import (
    QUEUES,
    FailoverCluster,
    Load,
    check_history,
    read_topic,
)

pytestmark = pytest.mark.integration

SET_A = "broker-a"
TOPIC = "orders"
QUORUM = {"inSyncReplicas": "2", "enableAutoInSyncReplicas": "true", "minInSyncReplicas": "1"}
INTERVAL_MS = 300  # topicTableIntervalMs: a commit every 0.3 s keeps the test short
CATCH_UP_S = 30.0  # the table reaching the master's end (2 shared cores, Parquet writes)
ELECTION_DEADLINE_S = 15.0


def _cluster(tmp_path: Path, **extra: str) -> tuple[FailoverCluster, str]:
    tier = tmp_path / "tier"
    cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, **QUORUM,
                              tieredStoreUrl=f"file://{tier}",
                              topicTableIntervalMs=str(INTERVAL_MS), **extra)
    return cluster, str(tier / "tables" / TOPIC)


def _producer_config(cluster: FailoverCluster) -> ClientConfig:
    return ClientConfig(controller=cluster.controller_addr, request_timeout_ms=3000,
                        send_deadline_ms=10_000, retries_max=60, backoff_max_ms=300)


def _create_table_topic(cluster: FailoverCluster, master: str, *, cli: bool = False) -> None:
    """The topic, with table=delta: through the API, or rocketha-admin as a user runs it."""
    if not cli:
        admin = Admin(ClientConfig(brokers=(cluster.endpoint(master),)))
        assert admin.create_topic(TOPIC, queues=QUEUES, table="delta")["table"] == "delta"
        return
    done = subprocess.run([sys.executable, "-m", "rocketha_admin", "--controller",
                           cluster.controller_addr, "topic", "create", "--topic", TOPIC,
                           "--queues", str(QUEUES), "--table", "delta", "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert [row["table"] for row in json.loads(done.stdout)] == ["delta"]


def _table_next_offsets(uri: str) -> list[int | None]:
    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return [None] * QUEUES
    return [table.transaction_version(queue_app_id(SET_A, q)) for q in range(QUEUES)]


def _wait_table_at(uri: str, cluster: FailoverCluster, master: str) -> None:
    """Until each queue's txn version in the table is the master's confirmed end offset."""
    admin = Admin(ClientConfig(brokers=(cluster.endpoint(master),), retries_max=3))
    ends = {q["queue_id"]: q["max_queue_offset"] for q in admin.queue_offsets(TOPIC)}
    wait_for(lambda: _table_next_offsets(uri) == [ends[q] for q in range(QUEUES)],
             CATCH_UP_S, f"the table at the master's end offsets {ends} (table: "
             f"{_table_next_offsets(uri)}; {master}: "
             f"{(cluster.info(master) or {}).get('topic_tables')})")


def _assert_table_is_the_topic(uri: str, found: dict[tuple[int, int], bytes],
                               load: Load) -> pa.Table:
    """The table holds exactly the replica's messages, each once, offsets contiguous, and
    every acked message of the load."""
    table = DeltaTable(uri).to_pyarrow_table()
    places = list(zip(table["queueId"].to_pylist(), table["queueOffset"].to_pylist(),
                      strict=True))
    assert len(places) == len(set(places)), "a (queue, offset) is in the table twice"
    for queue_id in range(QUEUES):
        offsets = sorted(o for q, o in places if q == queue_id)
        assert offsets == list(range(len(offsets))), f"queue {queue_id}: gaps {offsets[:20]}"
    in_table = dict(zip(places, table["body"].to_pylist(), strict=True))
    assert in_table == found, "the table differs from what the master holds"
    verdict = check_history(load, in_table)
    assert verdict.acked > 0
    assert not (verdict.lost or verdict.duplicated or verdict.wrong_offsets
                or verdict.unexpected), verdict.summary()
    assert set(table["brokerName"].to_pylist()) == {SET_A}
    assert set(table["topic"].to_pylist()) == {TOPIC}
    return table


def test_the_table_holds_every_acked_message_once(tmp_path: Path) -> None:
    cluster = load = None
    try:
        cluster, uri = _cluster(tmp_path)
        master, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 3)
        _create_table_topic(cluster, master, cli=True)
        load = Load(_producer_config(cluster), TOPIC, "r" + uuid.uuid4().hex[:8],
                    messages_max=600).start()
        load.wait_acks(600, timeout_s=60)
        load.stop()
        cluster.wait_confirm_at_end(master)
        _wait_table_at(uri, cluster, master)
        _assert_table_is_the_topic(uri, read_topic(cluster.endpoint(master), TOPIC), load)
        snapshot = DeltaTable(uri)
        assert split_fence(snapshot.transaction_version(fence_app_id(SET_A)))[0] == \
            info["master_epoch"]
        assert snapshot.metadata().partition_columns == ["storeDate"]
        assert snapshot.version() >= 1  # several intervals: several commits
        stats = cluster.info_now(master)["topic_tables"]
        assert stats["role"] == "master" and stats["topics"][TOPIC]["rows"] == 600
        slave = next(name for name in cluster.members(SET_A) if name != master)
        assert cluster.info_now(slave)["topic_tables"]["topics"] == {}  # slaves write nothing
        _delete_topic_then_its_table(cluster, master, uri, snapshot.version())
    finally:
        if load is not None:
            load.abort()
        if cluster is not None:
            cluster.down()


def _admin_json(cluster: FailoverCluster, *args: str) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, "-m", "rocketha_admin", "--controller",
                           cluster.controller_addr, *args, "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _delete_topic_then_its_table(cluster: FailoverCluster, master: str, uri: str,
                                 version: int) -> None:
    """A plain delete leaves the table whole; --delete-table removes it, for good (later
    passes do not start it again); asked again, it says there was nothing to remove."""
    assert _admin_json(cluster, "topic", "delete", "--topic", TOPIC) == [
        {"replica_set": SET_A, "topic": TOPIC, "deleted": True}]
    assert DeltaTable(uri).version() == version  # the table stays, unchanged
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 600
    assert _admin_json(cluster, "topic", "delete", "--topic", TOPIC, "--delete-table") == [
        {"replica_set": SET_A, "topic": TOPIC, "deleted": False, "table_deleted": True}]
    assert not Path(uri).exists()
    passes = cluster.info_now(master)["topic_tables"]["passes"]
    wait_for(lambda: cluster.info_now(master)["topic_tables"]["passes"] >= passes + 2,
             CATCH_UP_S, "two more passes of the table thread")
    assert not Path(uri).exists(), "a pass started the removed table again"
    assert _admin_json(cluster, "topic", "delete", "--topic", TOPIC, "--delete-table") == [
        {"replica_set": SET_A, "topic": TOPIC, "deleted": False, "table_deleted": False}]


def _log_versions(uri: str) -> int:
    log = Path(uri) / "_delta_log"
    return len(list(log.glob("*.json"))) if log.is_dir() else 0


def _fail_over_and_check(cluster: FailoverCluster, uri: str, load: Load, old: str,
                         old_epoch: int, killed_at: float
                         ) -> tuple[str, dict[str, Any], pa.Table]:
    """After `old` died: a new master, 300 more acks, then the table caught up is the topic."""
    new, new_info = cluster.wait_master(SET_A, min_epoch=old_epoch + 1, exclude=[old],
                                        timeout_s=ELECTION_DEADLINE_S)
    load.wait_acks(len(load.acked) + 300, timeout_s=ELECTION_DEADLINE_S)
    load.stop()
    assert load.acks_after(killed_at), "no PUT_OK after the failover"
    cluster.wait_confirm_at_end(new)
    _wait_table_at(uri, cluster, new)
    table = _assert_table_is_the_topic(uri, read_topic(cluster.endpoint(new), TOPIC), load)
    return new, new_info, table


def test_sigkill_of_the_master_while_materializing(tmp_path: Path) -> None:
    cluster = load = None
    try:
        cluster, uri = _cluster(tmp_path)
        old, old_info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3)
        old_epoch = old_info["master_epoch"]
        _create_table_topic(cluster, old)
        load = Load(_producer_config(cluster), TOPIC, "r" + uuid.uuid4().hex[:8],
                    messages_max=100_000, duration_max_s=90).start()
        load.wait_acks(300)
        # kill right after a commit of the old master, while produce goes on: its next pass
        # is reading the store or writing Parquet when SIGKILL lands
        committed = wait_for(lambda: _log_versions(uri) if _log_versions(uri) >= 3 else None,
                             CATCH_UP_S, "three commits of the old master")
        wait_for(lambda: _log_versions(uri) > committed, CATCH_UP_S, "one more commit")
        cluster.kill(old)
        killed_at = time.monotonic()
        rows_before = DeltaTable(uri).to_pyarrow_table().num_rows
        assert rows_before > 0

        _, new_info, table = _fail_over_and_check(cluster, uri, load, old, old_epoch,
                                                  killed_at)
        assert table.num_rows > rows_before
        fence = split_fence(DeltaTable(uri).transaction_version(fence_app_id(SET_A)))
        assert fence[0] == new_info["master_epoch"] > old_epoch
        print(f"\n{table.num_rows} rows, {rows_before} before the kill; "
              f"{DeltaTable(uri).version() + 1} commits; fence {fence}")
    finally:
        if load is not None:
            load.abort()
        if cluster is not None:
            cluster.down()


def _data_files(uri: str) -> set[str]:
    return {str(path) for path in Path(uri).glob("storeDate=*/*.parquet")}


def test_sigkill_between_a_commits_data_files_and_its_log_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The master dies (SIGKILL, ha/broker/table_crash.py) after writing a commit's Parquet
    files and before its log entry. Those files hold the next rows of the table, so a reader
    that took them would see those messages twice: after the failover, the table holds every
    acked message exactly once, and the new master's upkeep (vacuum at 0 hours here) deletes
    the orphan files."""
    trigger = tmp_path / "crash-trigger"
    monkeypatch.setenv(CRASH_TRIGGER_ENV, str(trigger))  # the brokers inherit it
    cluster = load = None
    try:
        cluster, uri = _cluster(tmp_path, topicTableVacuumHours="0",
                                topicTableMaintenanceIntervalMs="1000")
        old, old_info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3)
        _create_table_topic(cluster, old)
        load = Load(_producer_config(cluster), TOPIC, "r" + uuid.uuid4().hex[:8],
                    messages_max=100_000, duration_max_s=90).start()
        load.wait_acks(300)
        wait_for(lambda: _log_versions(uri) >= 2 or None, CATCH_UP_S, "two commits")
        trigger.touch()  # the old master's next commit with rows crashes
        wait_for(lambda: cluster.pid(old) is None, CATCH_UP_S,
                 f"{old} to kill itself at a commit (trigger {trigger.exists()})")
        killed_at = time.monotonic()
        assert not trigger.exists()
        snapshot = DeltaTable(uri)
        listed = {uri_.removeprefix("file://") for uri_ in snapshot.file_uris()}
        orphans = _data_files(uri) - listed
        assert orphans, "the crash left no data file"
        ends = {q: snapshot.transaction_version(queue_app_id(SET_A, q)) for q in range(QUEUES)}
        orphan_rows = pa.concat_tables([pq.read_table(path, columns=["queueId", "queueOffset"])
                                        for path in sorted(orphans)])
        for queue_id, offset in zip(orphan_rows["queueId"].to_pylist(),
                                    orphan_rows["queueOffset"].to_pylist(), strict=True):
            assert offset >= (ends[queue_id] or 0), "an orphan row is one the table holds"

        new, _, table = _fail_over_and_check(cluster, uri, load, old,
                                             old_info["master_epoch"], killed_at)
        held = set(zip(table["queueId"].to_pylist(), table["queueOffset"].to_pylist(),
                       strict=True))
        assert set(zip(orphan_rows["queueId"].to_pylist(),
                       orphan_rows["queueOffset"].to_pylist(), strict=True)) <= held
        wait_for(lambda: not (orphans & _data_files(uri)), CATCH_UP_S,
                 f"the new master's vacuum to delete {len(orphans)} orphan file(s) "
                 f"({(cluster.info(new) or {}).get('topic_tables')})")
        assert DeltaTable(uri).to_pyarrow_table().num_rows == table.num_rows
    finally:
        if load is not None:
            load.abort()
        if cluster is not None:
            cluster.down()

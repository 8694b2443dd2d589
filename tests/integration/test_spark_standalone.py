"""Spark on a standalone cluster, brokers and controller on test hosts.

Goal: the pipelines run where executors share nothing with the driver but the file system: a
real Spark standalone master and two workers (separate JVMs from the pyspark package, each
executor with its own Python workers), the driver under `spark-submit --master spark://...`,
and the brokers and the controller on test hosts (network namespaces) that every Spark process
reaches only through their advertised 198.18.x.y addresses. Checked: ingest_to_table (a
streaming read, topic -> Delta) puts every message in the table exactly once; a streaming copy
topic -> topic through `format("rocketha")` on both sides adds nothing when Spark replays a
batch whose commit it lost (the brokers drop the resent rows); tasks ran in the workers'
executors.

Method: one FailoverCluster(hosts=True) (1 controller, 2 brokers in controller mode) and one
spark_app.standalone.StandaloneCluster, master and driver on the root namespace's bridge
address, each worker on a further test host of that network (so an executor's 127.0.0.1 is
its own loopback, and the driver is reached at the bridge address), both per
module (the only module using them: one start per session, ~40 s of JVM starts on a busy
2-core machine); one spark-submit (tests/integration/standalone_copy_job.py) runs
ingest_to_table, then the copy and its replay. Skipped where test hosts cannot be made (not root).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from connector import Admin, ClientConfig, Producer
from spark_app.standalone import StandaloneCluster, spark_bin
from tests.integration.failover_cluster import FailoverCluster
from tests.support.hosts import hosts_skip_reason

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SET_A = "broker-a"
SUBMIT_TIMEOUT_S = 420.0
ORDERS = 3000
COPY_ROWS = 4000
QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailoverCluster]:
    reason = hosts_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    made = FailoverCluster(tmp_path_factory.mktemp("standalone") / "cluster", controllers=1,
                           replicas=2, hosts=True,
                           defaultTopicQueueNums=str(QUEUES))
    try:
        made.wait_master(SET_A, timeout_s=60)
        yield made
    finally:
        made.down()


@pytest.fixture(scope="module")
def standalone(cluster: FailoverCluster,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """The master and the driver on the root namespace's bridge address, each worker (with
    its executors and their Python workers) on a test host of its own, added to the
    cluster's network for the workers and removed after them."""
    network = cluster.network
    assert network is not None
    first = len(network.hosts) + 1
    network.grow(first + 1)
    workers = [network.host(index) for index in (first, first + 1)]
    spark_cluster = StandaloneCluster(
        tmp_path_factory.mktemp("spark"), host=network.root_address, workers=2,
        pythonpath=(str(ROOT),),
        worker_hosts=[(host.address, host.launcher()) for host in workers])
    try:
        with spark_cluster.start():
            yield spark_cluster
    finally:  # `down` removes the hosts the cluster tool made, not these
        network.shrink(first - 1)


def submit(spark_cluster: StandaloneCluster, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(spark_bin("spark-submit")), "--master", spark_cluster.master_url,
                           *spark_cluster.submit_conf(), *args], env=spark_cluster.submit_env(),
                          capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S, cwd=ROOT,
                          check=False)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    return done


def fill(config: ClientConfig, topic: str, rows: list[dict[str, object]]) -> None:
    Admin(config).create_topic(topic, queues=QUEUES)
    with Producer(config) as producer:
        for start in range(0, len(rows), 500):
            results = producer.send_batch(topic, rows[start:start + 500])
            assert all(r.status == "PUT_OK" for r in results), results[:3]


@dataclasses.dataclass(frozen=True)
class JobRun:
    """What the one spark-submit of this module left behind."""

    stdout: str
    table: Path
    dropped_before: int
    master_admin: Admin


@pytest.fixture(scope="module")
def job(cluster: FailoverCluster, standalone: StandaloneCluster,
        tmp_path_factory: pytest.TempPathFactory) -> JobRun:
    """Topics filled, then one spark-submit: ingest_to_table, then the streaming copy."""
    work = tmp_path_factory.mktemp("jobs")
    config = ClientConfig(controller=cluster.controller_addr)
    fill(config, "sa_orders", [
        {"body": json.dumps({"order": i, "kind": "paid"}).encode(), "key": f"c{i % 50}"}
        for i in range(ORDERS)])
    fill(config, "sa_source", [{"body": f"m{i}".encode(), "key": f"k{i % 64}"}
                               for i in range(COPY_ROWS)])
    Admin(config).create_topic("sa_target", queues=QUEUES)
    master, _ = cluster.wait_master(SET_A)
    master_admin = Admin(ClientConfig(brokers=(cluster.endpoint(master),)))
    dropped_before = int(master_admin.broker_stats()["idempotence"]["duplicates_dropped"])
    table = work / "orders_table"
    done = submit(standalone, str(ROOT / "tests" / "integration" / "standalone_copy_job.py"),
                  cluster.controller_addr, "sa_source", "sa_target", str(work / "copy_cp"),
                  "--ingest", "--controller", cluster.controller_addr, "--topics", "sa_orders",
                  "--table", str(table), "--checkpoint", str(work / "ingest_cp"),
                  "--trigger", "available-now", "--body-json-schema", "order BIGINT, kind STRING",
                  "--option", "readFromReplicas=true", "--query-name", "sa_ingest")
    return JobRun(done.stdout, table, dropped_before, master_admin)


def test_cluster_is_on_the_bridge_not_loopback(cluster: FailoverCluster,
                                               standalone: StandaloneCluster) -> None:
    state = standalone.state()
    assert state is not None
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 2, state["workers"]
    assert sorted(w["host"] for w in alive) == sorted(a for a, _ in standalone.worker_hosts)
    assert standalone.host not in {w["host"] for w in alive}  # workers on hosts of their own
    assert not standalone.host.startswith("127."), standalone.host
    endpoints = [cluster.endpoint(name) for name in [*cluster.brokers, *cluster.controllers]]
    assert all(e.startswith("198.1") for e in endpoints), endpoints


def test_ingest_to_table_on_the_standalone_cluster(standalone: StandaloneCluster,
                                                   job: JobRun) -> None:
    line = next(line for line in job.stdout.splitlines() if line.startswith('{"batches"'))
    summary = json.loads(line)
    assert summary["rows"] == ORDERS, summary
    orders = DeltaTable(str(job.table)).to_pyarrow_table(columns=["order"]).column("order")
    assert len(orders) == ORDERS
    assert sorted(orders.to_pylist()) == list(range(ORDERS))
    logs = standalone.executor_logs()
    assert {log.parts[-4] for log in logs} >= {"worker-1", "worker-2"}, logs


def test_streaming_copy_is_exactly_once_across_a_replay(cluster: FailoverCluster,
                                                        job: JobRun) -> None:
    line = next(line for line in job.stdout.splitlines() if line.startswith("SUMMARY "))
    summary = json.loads(line.removeprefix("SUMMARY "))
    assert summary["batches"] >= 2, summary  # maxOffsetsPerTrigger 2000 of 4000 rows
    assert summary["target_rows"] == COPY_ROWS, summary
    assert summary["target_distinct"] == COPY_ROWS, summary
    offsets = Admin(ClientConfig(controller=cluster.controller_addr)).queue_offsets("sa_target")
    assert sum(q["max_queue_offset"] - q["min_queue_offset"] for q in offsets) == COPY_ROWS
    dropped = int(job.master_admin.broker_stats()["idempotence"]["duplicates_dropped"])
    assert dropped > job.dropped_before, "the replayed batch was not sent again"

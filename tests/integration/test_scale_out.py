"""A replica set added to a running cluster takes a topic's writes, and a streaming query that
was running before the add reads its queues without a restart.

Goal: `rocketha-cluster add-set` starts broker-b in a cluster with a controller and one set;
`rocketha-admin topic update --add-broker-name broker-b --queues 4` extends the topic onto it;
the Spark sink (option controller) then writes to both sets; a streaming query started before
the add reads every acknowledged message exactly once, including those in broker-b's queues
(they join at their earliest offset: none is skipped). Then `--remove-broker-name broker-b`
drains it: writes there are refused, the sink's next tasks all go to broker-a, reads go on,
the lag of a group that read it all is 0, and what the sets hold is what was acknowledged.
`rocketha-cluster drop-set` is refused in one line while a group lags there, then stops
broker-b and the controller forgets it; the query, restarted from its checkpoint (which names
broker-b's queues), goes on: every message read exactly once.

Method: real processes (`rocketha-cluster up`, the admin tool as a subprocess), the shared
SparkSession; every wait polls a condition with a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from connector import Admin, ClientConfig, Producer
from connector.client import controller_cluster_list
from connector.protocol import RocketHAError
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import ROOT, FailoverCluster, _env, cluster_cli

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "scale_out"
QUEUES = 4
BEFORE = 200  # messages acknowledged by broker-a before the add
AFTER = 400  # written by the Spark sink after the extension (both sets)
PINNED = 50  # sent by a producer that names broker-b only
DRAINED_WRITES = 40  # written by the Spark sink after broker-b was drained
READ_DEADLINE_S = 120.0
START_ATTEMPTS = 3
SPARK_CONNECT_BACK = "Python worker failed to connect back"  # Spark's own start-up timeout


def admin(*args: str) -> subprocess.CompletedProcess[str]:
    """The admin tool, one JSON object per line (`--json-lines` after the command's words)."""
    return subprocess.run([sys.executable, "-m", "rocketha_admin", *args, "--json-lines"],
                          capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=_env(), check=False)


def json_rows(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return [json.loads(line) for line in result.stdout.splitlines()]


def _read(spark: Any, out: Path) -> Counter[tuple[str, str]]:
    """(brokerName, body) of every row the query wrote (the file sink commits each batch's
    files in its _spark_metadata log, so a restart from the checkpoint adds none twice)."""
    if not (out / "_spark_metadata").is_dir():
        return Counter()
    rows = spark.read.schema("brokerName STRING, body BINARY").parquet(str(out)).selectExpr(
        "brokerName", "CAST(body AS STRING) AS body").collect()
    return Counter((row["brokerName"], row["body"]) for row in rows)


def _has_read(spark: Any, query: Any, out: Path, count: int) -> bool:
    """The query wrote `count` rows or more (its error, if it failed, is the test's)."""
    error = query.exception()
    assert error is None, f"the streaming query failed: {error}"
    return sum(_read(spark, out).values()) >= count


def _start_read(spark: Any, cluster: FailoverCluster, tmp_path: Path) -> Any:
    """The streaming read, once it has planned a first micro-batch. Spark waits a fixed time
    for the Python process that runs the stream reader to connect back; on a loaded host
    (load 15 on 2 cores) that process may start later, and the query fails before it reads
    anything. Only that failure is answered by starting the query again."""
    for attempt in range(1, START_ATTEMPTS + 1):
        query = (spark.readStream.format("rocketha")
                 .option("controller", cluster.controller_addr).option("subscribe", TOPIC)
                 .option("startingOffsets", "earliest").load()
                 .writeStream.format("parquet").queryName("scale_out_read")
                 .option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="200 milliseconds").start())
        wait_for(lambda q=query: q.lastProgress is not None or q.exception() is not None,
                 READ_DEADLINE_S, "the query's first micro-batch")
        error = query.exception()
        if error is None:
            return query
        assert SPARK_CONNECT_BACK in str(error) and attempt < START_ATTEMPTS, str(error)
        query.stop()
    raise AssertionError("unreachable")


def _held(endpoint: str) -> int:
    queues = Admin(ClientConfig(brokers=(endpoint,))).queue_offsets(TOPIC)
    return sum(q["max_queue_offset"] - q["min_queue_offset"] for q in queues)


def test_a_set_added_while_a_query_runs_is_read_and_drained(spark: Any, tmp_path: Path
                                                             ) -> None:
    cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replica_sets=1, replicas=1)
    query = None
    controller = ["--controller", cluster.controller_addr]
    out_dir = tmp_path / "out"
    try:
        json_rows(admin(*controller, "topic", "create", "--topic", TOPIC, "--queues",
                        str(QUEUES)))
        with Producer(ClientConfig(controller=cluster.controller_addr), idempotent=True) as p:
            for index in range(BEFORE):
                assert p.send(TOPIC, f"m{index:05d}", key=f"k{index}").status == "PUT_OK"
        query = _start_read(spark, cluster, tmp_path)
        wait_for(lambda: _has_read(spark, query, out_dir, BEFORE),
                 READ_DEADLINE_S, "the query to read what broker-a held")

        out = cluster_cli("add-set", "--dir", str(cluster.directory))
        assert "broker-b master" in out, out
        manifest = json.loads((cluster.directory / "cluster.json").read_text())
        added = [b for b in manifest["brokers"] if b["set"] == "broker-b"]
        assert len(added) == 1
        endpoint_b = f"127.0.0.1:{added[0]['port']}"
        assert Admin(ClientConfig(brokers=(endpoint_b,))).broker_info()["broker_name"] == \
            "broker-b"
        extended = json_rows(admin(*controller, "topic", "update", "--topic", TOPIC,
                                   "--add-broker-name", "broker-b", "--queues", str(QUEUES)))
        assert [(r["replica_set"], r["write_queue_nums"], r["perm"]) for r in extended] == [
            ("broker-b", QUEUES, 6)], extended

        bodies = [(f"m{index:05d}", f"k{index}") for index in range(BEFORE, BEFORE + AFTER)]
        (spark.createDataFrame(bodies, "value STRING, key STRING").repartition(4)
         .write.format("rocketha").option("controller", cluster.controller_addr)
         .option("topic", TOPIC).mode("append").save())
        with Producer(ClientConfig(brokers=(endpoint_b,)), idempotent=True) as p:
            for index in range(BEFORE + AFTER, BEFORE + AFTER + PINNED):
                assert p.send(TOPIC, f"m{index:05d}").status == "PUT_OK"
        total = BEFORE + AFTER + PINNED
        held_b = _held(endpoint_b)
        assert held_b >= PINNED + 1, "the sink wrote nothing to the new set"
        assert _held(cluster.endpoint("broker-a")) + held_b == total

        wait_for(lambda: _has_read(spark, query, out_dir, total),
                 READ_DEADLINE_S, "the query to read both sets")
        read = _read(spark, out_dir)
        bodies_read = Counter(body for _, body in read.elements())
        expected = {f"m{index:05d}" for index in range(total)}
        assert set(bodies_read) == expected, sorted(expected ^ set(bodies_read))[:10]
        assert max(bodies_read.values()) == 1, bodies_read.most_common(3)
        assert sum(n for (name, _), n in read.items() if name == "broker-b") == held_b

        # drain: write off on broker-b; reads go on; a group that read it all has no lag
        for queue in Admin(ClientConfig(brokers=(endpoint_b,))).queue_offsets(TOPIC):
            Admin(ClientConfig(brokers=(endpoint_b,))).commit_offset(
                "drainer", TOPIC, queue["queue_id"], queue["max_queue_offset"])
        lag = json_rows(admin(*controller, "topic", "update", "--topic", TOPIC,
                              "--remove-broker-name", "broker-b"))
        assert {(r["group"], r["lag"]) for r in lag} == {("drainer", 0)}, lag
        with (pytest.raises(RocketHAError, match="not writable"),
              Producer(ClientConfig(brokers=(endpoint_b,), retries_max=0)) as p):
            p.send(TOPIC, "refused")
        assert _held(endpoint_b) == held_b
        held_a = _held(cluster.endpoint("broker-a"))
        drained = [(f"d{index:05d}", f"k{index}") for index in range(DRAINED_WRITES)]
        (spark.createDataFrame(drained, "value STRING, key STRING").repartition(4)
         .write.format("rocketha").option("controller", cluster.controller_addr)
         .option("topic", TOPIC).mode("append").save())  # every task to broker-a now
        assert _held(endpoint_b) == held_b
        assert _held(cluster.endpoint("broker-a")) == held_a + DRAINED_WRITES
        refused = admin(*controller, "topic", "update", "--topic", TOPIC,
                        "--remove-broker-name", "broker-a")
        assert refused.returncode == 2 and "no other replica set takes writes" in \
            refused.stderr, (refused.stdout, refused.stderr)

        # remove: refused while a group has not read it all; then stopped and forgotten
        Admin(ClientConfig(brokers=(endpoint_b,))).commit_offset("laggard", TOPIC, 0, 0)
        remove = subprocess.run([sys.executable, "-m", "ha.cluster", "drop-set", "--dir",
                                 str(cluster.directory)], capture_output=True, text=True,
                                timeout=120, cwd=ROOT, env=_env(), check=False)
        assert remove.returncode == 1 and "group laggard lags" in remove.stderr, (
            remove.stdout, remove.stderr)
        assert len(remove.stderr.strip().splitlines()) == 1, remove.stderr
        assert _held(endpoint_b) == held_b  # still running, nothing changed
        Admin(ClientConfig(brokers=(endpoint_b,))).action("delete_group", {"group": "laggard"})
        # until the controller notices the stopped set (a heartbeat timeout) it still names
        # it, and the source fails on a set it cannot reach: stopped first, restarted after
        query.stop()
        out = cluster_cli("drop-set", "--dir", str(cluster.directory))
        assert "broker-b removed" in out, out
        names = {s["replica"]["broker_name"] for s in controller_cluster_list(
            cluster.controller_addr, 5000).get("replica_sets", [])}
        assert names == {"broker-a"}, names
        with Producer(ClientConfig(controller=cluster.controller_addr), idempotent=True) as p:
            assert p.send(TOPIC, "after-remove").status == "PUT_OK"
        query = _start_read(spark, cluster, tmp_path)  # the checkpoint names broker-b's queues
        wait_for(lambda: _has_read(spark, query, out_dir, total + DRAINED_WRITES + 1),
                 READ_DEADLINE_S, "the restarted query to read the last message")
        read_after = _read(spark, out_dir)
        later = Counter({("broker-a", body): 1 for body, _ in drained})
        later[("broker-a", "after-remove")] = 1
        assert read_after == read + later  # each once: none lost, none read twice
    finally:
        if query is not None:
            query.stop()
        cluster.down()

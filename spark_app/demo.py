"""The demo (`python3 build.py demo`): a replica set, an order stream, Spark ingest, tiering.

What it runs, all on 127.0.0.1 with data under one directory (default `./demo-data`):

1. `rocketha-cluster up --replicas 3`: one replica set (brokerId 0 SYNC_MASTER, two SLAVEs),
   quorum inSyncReplicas=2 with adaptive degradation down to 1, slaves serving reads, 256 KiB
   CommitLog segments (small, so a short demo seals several) tiered to `<dir>/tier` (file://, shared by the set).
2. `ingest_to_table` under real `spark-submit` streams the `orders` topic into a Delta table
   (deltalake engine: Maven is unreachable here) while orders are produced.
3. Orders (keyed by customer, tagged by kind) go in through the client library; half way the
   master is SIGKILLed. Roles are static until the controller drives brokers (controller
   mode, issue 5), so the master is restarted, not replaced: `failover_s` is the producer's
   view, SIGKILL to the first PUT_OK afterwards.
4. It waits for sealed segments to reach the tier, for the ingest to catch up and stop, then
   reruns the ingest from its checkpoint (`available-now`) to show a restart adds nothing.

The last line printed is one JSON object: `produced_acked`, `table_rows`,
`table_distinct_orders`, `failover_s`, `tiered_segments`, `rerun_rows`, ... Exit status 0 only
when every acknowledged order is in the table exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from deltalake import DeltaTable

from connector import Admin, ClientConfig, Producer

__all__ = ["main"]

KINDS = ("created", "paid", "shipped", "cancelled")
CUSTOMERS = 500
QUEUES = 4
TOPIC = "orders"
BODY_SCHEMA = "order BIGINT, customer STRING, kind STRING, amount_cents BIGINT"
ROOT = Path(__file__).resolve().parents[1]
INGEST_SCRIPT = ROOT / "spark_app" / "ingest_to_table.py"
CLUSTER_SETTINGS = (
    "flushDiskType=ASYNC_FLUSH", "inSyncReplicas=2", "enableAutoInSyncReplicas=true",
    "minInSyncReplicas=1", "slaveReadEnable=true", "mappedFileSizeCommitLog=262144",
    "maxMessageSize=65536",
    "tieredStoreEnable=true", "tieredUploadIntervalMs=500",
)
INGEST_IDLE_S = 20.0  # default --ingest-idle-s: the ingest stops once caught up this long
INGEST_TIMEOUT_S = 600.0  # and in any case after this long
TIER_WAIT_S = 60.0


def cluster(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                            text=True, timeout=180)
    if result.returncode != 0:
        raise SystemExit(f"rocketha-cluster {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def brokers(directory: Path) -> list[dict[str, Any]]:
    status = json.loads(cluster("status", "--dir", str(directory), "--json"))
    return sorted((p for p in status["processes"] if p.get("kind") == "broker"),
                  key=lambda p: p["broker_id"])


def order_batch(rng: random.Random, first: int, count: int) -> list[dict[str, object]]:
    rows = []
    for seq in range(first, first + count):
        customer = f"customer-{rng.randrange(CUSTOMERS)}"
        kind = rng.choice(KINDS)
        body = json.dumps({"order": seq, "customer": customer, "kind": kind,
                           "amount_cents": rng.randrange(100, 100_000)}).encode()
        rows.append({"body": body, "key": customer, "tags": kind})
    return rows


def spark_submit(directory: Path, endpoints: list[str], trigger: str, log_name: str,
                 idle_s: float = INGEST_IDLE_S) -> subprocess.Popen[bytes]:
    """ingest_to_table under spark-submit, output in <dir>/logs/<log_name>."""
    venv_bin = Path(sys.executable).parent
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    argv = [str(venv_bin / "spark-submit"), "--master", "local[2,4]",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
            str(INGEST_SCRIPT), "--brokers", ",".join(endpoints), "--topics", TOPIC,
            "--table", str(directory / "orders_table"),
            "--checkpoint", str(directory / "checkpoints" / "orders_table"),
            "--trigger", trigger, "--body-json-schema", BODY_SCHEMA,
            "--option", "readFromReplicas=true",
            "--idle-timeout-s", str(idle_s), "--timeout-s", str(INGEST_TIMEOUT_S)]
    log_path = directory / "logs" / log_name
    print(f"spark-submit ingest_to_table ({trigger}), log in {log_path}", flush=True)
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def kill_master_and_restart(directory: Path, master: dict[str, Any]) -> float:
    """SIGKILL the master; start it again (static roles). Returns the monotonic kill time."""
    pid = int(master["pid"])
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    print(f"SIGKILL master {master['name']} (pid {pid}) mid-stream", flush=True)
    deadline = killed + 10
    while time.monotonic() < deadline:  # the kernel frees its lock and ports once it is gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    cluster("up", "--dir", str(directory))
    return killed


def produce(directory: Path, master: dict[str, Any], orders: int, batch: int
            ) -> tuple[int, float]:
    """All orders through the master, SIGKILL + restart half way; (acked, failover seconds)."""
    config = ClientConfig(brokers=(master["endpoint"],), send_deadline_ms=60_000)
    rng = random.Random(7)
    acked, killed_at, failover_s = 0, None, 0.0
    with Producer(config) as producer:
        for first in range(0, orders, batch):
            if killed_at is None and first >= orders // 2:
                killed_at = kill_master_and_restart(directory, master)
            results = producer.send_batch(TOPIC, order_batch(rng, first,
                                                             min(batch, orders - first)))
            acked += sum(result.ok for result in results)
            if killed_at is not None and not failover_s and any(r.ok for r in results):
                failover_s = time.monotonic() - killed_at
                print(f"first PUT_OK {failover_s:.2f}s after the SIGKILL", flush=True)
    return acked, failover_s


def tier_stats(master: dict[str, Any]) -> dict[str, Any]:
    return Admin(ClientConfig(brokers=(master["endpoint"],))).broker_info().get("tiered", {})


def wait_for_tier(master: dict[str, Any], deadline_s: float) -> dict[str, Any]:
    """Broker tier stats once segments are listed and no sealed one waits (upload lag 0), or
    at the deadline."""
    deadline = time.monotonic() + deadline_s

    def caught_up(stats: dict[str, Any]) -> bool:
        pending = stats.get("upload", {}).get("pending_segments", 1)
        return stats.get("tier_segments", 0) >= 1 and pending == 0

    stats = tier_stats(master)
    while not caught_up(stats) and time.monotonic() < deadline:
        time.sleep(0.5)
        stats = tier_stats(master)
    return stats


def table_counts(table: Path) -> tuple[int, int]:
    """(rows, distinct orders) of the Delta table, read with deltalake."""
    if not (table / "_delta_log").exists():
        return 0, 0
    orders = DeltaTable(str(table)).to_pyarrow_table(columns=["order"]).column("order")
    return len(orders), len(pc.unique(orders))


def wait_ingest(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.terminate()
        return process.wait(timeout=30)


def fresh_directory(directory: Path) -> None:
    """Start from nothing: an earlier demo's directory (it has cluster.json) is stopped and
    removed; any other non-empty directory is refused rather than deleted."""
    if not directory.exists() or not any(directory.iterdir()):
        return
    if not (directory / "cluster.json").exists():
        raise SystemExit(f"demo: {directory} is not empty and not a demo directory; "
                         "pass --dir with a new or earlier demo directory")
    cluster("down", "--dir", str(directory))
    shutil.rmtree(directory)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"))
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--ingest-idle-s", type=float, default=INGEST_IDLE_S,
                        help="the streaming ingest stops once it saw no rows for this long")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    fresh_directory(directory)
    print(f"demo data under {directory}", flush=True)
    cluster("up", "--dir", str(directory), "--replicas", "3",
            *[item for setting in CLUSTER_SETTINGS for item in ("--set", setting)],
            "--set", f"tieredStoreUrl=file://{directory / 'tier'}")
    ingest: subprocess.Popen[bytes] | None = None
    try:
        members = brokers(directory)
        master, endpoints = members[0], [m["endpoint"] for m in members]
        Admin(ClientConfig(brokers=(master["endpoint"],))).create_topic(TOPIC, queues=QUEUES)
        ingest = spark_submit(directory, endpoints, "processing:2s", "ingest.log",
                              args.ingest_idle_s)
        started = time.monotonic()
        acked, failover_s = produce(directory, master, args.orders, args.batch)
        produce_s = time.monotonic() - started
        print(f"{acked} of {args.orders} orders acknowledged in {produce_s:.1f}s", flush=True)
        tier = wait_for_tier(master, TIER_WAIT_S)
        ingest_rc = wait_ingest(ingest, INGEST_TIMEOUT_S)
        rows, distinct = table_counts(directory / "orders_table")
        print(f"ingest exited {ingest_rc}; table holds {rows} rows ({distinct} orders)",
              flush=True)
        rerun = spark_submit(directory, endpoints, "available-now", "ingest-rerun.log")
        rerun_rc = wait_ingest(rerun, INGEST_TIMEOUT_S)
        rerun_rows = table_counts(directory / "orders_table")[0] - rows
        summary = {
            "produced_acked": acked, "orders": args.orders, "table_rows": rows,
            "table_distinct_orders": distinct, "failover_s": round(failover_s, 3),
            "failover_mode": "static roles: master restarted (controller mode: issue 5)",
            "tiered_segments": tier.get("tier_segments", 0),
            "tiered_bytes": tier.get("tier_bytes", 0), "tier_url": tier.get("url"),
            "ingest_exit": ingest_rc, "rerun_exit": rerun_rc, "rerun_rows": rerun_rows,
            "produce_s": round(produce_s, 2), "data_dir": str(directory),
        }
        print(json.dumps(summary, sort_keys=True), flush=True)
        exact = rows == distinct == acked == args.orders and rerun_rows == 0
        return 0 if exact and ingest_rc == rerun_rc == 0 else 1
    finally:
        if ingest is not None and ingest.poll() is None:
            ingest.kill()
        cluster("down", "--dir", str(directory))


if __name__ == "__main__":
    sys.exit(main())

"""The demo's harness (examples/demo/pipeline.py runs the story): the cluster, Spark and the
tier as the demo sees them, from outside, through the tools and the client a user has.

`rocketha-cluster` (up, status, down) as a subprocess; broker_info probes through the client
with the cluster's client.properties; spark-submit of spark_app/ingest_to_table.py on local
Spark, a standalone cluster started here (spark_app/standalone.py) or one someone else runs;
the Delta table read back with deltalake; the file:// tier's manifests read as files. Every
wait is bounded (a SystemExit naming what did not happen).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.compute as pc
from deltalake import DeltaTable

from connector import Admin, ClientConfig
from connector.protocol import RocketHAError
from spark_app.standalone import StandaloneCluster

__all__ = [
    "BODY_SCHEMA",
    "INGEST_IDLE_S",
    "INGEST_TIMEOUT_S",
    "REPLICAS",
    "REPLICA_SET",
    "ROLES_WAIT_S",
    "ROOT",
    "TOPIC",
    "SparkTarget",
    "begin",
    "child_env",
    "client",
    "cluster",
    "existing_spark",
    "fresh_directory",
    "full_set_master",
    "ingest_committed",
    "local_spark",
    "print_tier",
    "probe",
    "processes",
    "say",
    "spark_submit",
    "standalone_spark",
    "stop_process",
    "table_orders",
    "tier_by_epoch",
    "tier_manifest",
    "wait_for",
    "wait_for_tier",
    "wait_ingest",
    "wait_rejoined",
]

TOPIC = "orders"
REPLICA_SET = "broker-a"
REPLICAS = 3
BODY_SCHEMA = "order BIGINT, customer STRING, kind STRING, amount_cents BIGINT"
ROOT = Path(__file__).resolve().parents[2]
INGEST_SCRIPT = ROOT / "spark_app" / "ingest_to_table.py"
INGEST_IDLE_S = 20.0  # default --ingest-idle-s: the ingest stops once caught up this long
INGEST_TIMEOUT_S = 600.0  # and in any case after this long
ROLES_WAIT_S = 60.0  # controller-named roles, a new master, a rejoined slave in sync
PROBE_TIMEOUT_MS = 1_000
POLL_S = 0.1

T = TypeVar("T")

_started_at = time.monotonic()  # what say() counts from; reset by begin()
_client_properties: Path | None = None  # <dir>/client.properties; set by begin()


def begin(client_properties: Path) -> float:
    """Start the clock say() counts from (returned, monotonic seconds) and name the cluster's
    client.properties, which every client here and the ingest read."""
    global _started_at, _client_properties
    _started_at = time.monotonic()
    _client_properties = client_properties
    return _started_at


def say(text: str) -> None:
    """One progress line, prefixed with the seconds since the demo started."""
    print(f"[{time.monotonic() - _started_at:6.1f}s] {text}", flush=True)


# -- the cluster, seen from outside ----------------------------------------------------------------
def child_env() -> dict[str, str]:
    """The environment of every process the demo starts: this tree first on PYTHONPATH, so
    the cluster, spark-submit and its Python workers run the same code as the demo."""
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))


def cluster(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                            text=True, timeout=180, cwd=ROOT, env=child_env(), check=False)
    if result.returncode != 0:
        raise SystemExit(f"rocketha-cluster {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def processes(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(brokers by brokerId, controllers) from `rocketha-cluster status --json`."""
    status = json.loads(cluster("status", "--dir", str(directory), "--json"))["processes"]
    brokers = sorted((p for p in status if p.get("kind") == "broker"),
                     key=lambda p: p["broker_id"])
    return brokers, [p for p in status if p.get("kind") == "controller"]


def client(**fields: Any) -> ClientConfig:
    """A client with the cluster's client.properties (controllers, TLS, the admin's keys: the
    demo cluster is secured as every `rocketha-cluster up` is by default); `fields`
    override."""
    assert _client_properties is not None
    return ClientConfig.from_properties(_client_properties, **fields)


def probe(endpoint: str) -> dict[str, Any] | None:
    """One quick broker_info call; None when the broker does not answer."""
    config = client(brokers=(endpoint,), controller=None, request_timeout_ms=PROBE_TIMEOUT_MS,
                    send_deadline_ms=PROBE_TIMEOUT_MS, retries_max=0)
    try:
        return Admin(config).broker_info()
    except RocketHAError:
        return None


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float) -> T:
    """Poll `check()` until it returns something truthy; SystemExit naming `what` if not."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise SystemExit(f"demo: no {what} within {timeout_s:.0f}s")
        time.sleep(POLL_S)


def full_set_master(brokers: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The broker_info of the master once the controller named one, the others follow it and
    it counts all of them in its SyncStateSet; else None."""
    infos = [probe(broker["endpoint"]) for broker in brokers]
    masters = [info for info in infos if info and info.get("role") == "MASTER"]
    slaves = [info for info in infos if info and info.get("role") == "SLAVE"]
    if len(masters) != 1 or len(slaves) != len(brokers) - 1:
        return None
    return masters[0] if len(masters[0].get("sync_state_set", ())) == len(brokers) else None


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


# -- Spark -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SparkTarget:
    """Where spark-submit sends the ingest: `--master` and its flags, and the environment."""

    master: str
    conf: tuple[str, ...]
    env: dict[str, str]
    cluster: StandaloneCluster | None = None  # started (and stopped) by the demo


def spark_hosts(directory: Path) -> tuple[str, list[tuple[str, list[str]]]]:
    """(the address the master and the driver bind, [(address, launcher)] of each worker):
    with --hosts the root namespace's address on the test hosts' bridge and the cluster's two
    spare hosts (`up --spare-hosts 2`), so executors run on network stacks of their own; else
    127.0.0.1 for all."""
    manifest = json.loads((directory / "cluster.json").read_text())
    hosts = manifest.get("hosts") or {}
    workers = [(spare["address"], ["ip", "netns", "exec", spare["namespace"]])
               for spare in hosts.get("spare", ())]
    return str(hosts.get("root_address", "127.0.0.1")), workers


def local_spark() -> SparkTarget:
    return SparkTarget("local[2,4]", ("--conf", "spark.ui.enabled=false",
                                      "--conf", "spark.sql.shuffle.partitions=2"),
                       dict(child_env(), PYSPARK_PYTHON=sys.executable,
                            PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1"))


def standalone_spark(directory: Path) -> SparkTarget:
    """A standalone master and two workers (separate JVMs, each executor with its own Python
    workers; with --hosts each worker on a test host of its own): the driver and the
    executors reach the brokers only through their advertised addresses."""
    host, workers = spark_hosts(directory)
    where = ", ".join(address for address, _ in workers) or host
    say(f"starting a Spark standalone master on {host} and 2 workers on {where}")
    cluster = StandaloneCluster(directory / "spark", host=host, workers=2,
                                pythonpath=(str(ROOT),), worker_hosts=workers).start()
    say(f"Spark standalone cluster {cluster.master_url} up, 2 workers ALIVE")
    return SparkTarget(cluster.master_url, tuple(cluster.submit_conf()), cluster.submit_env(),
                       cluster)


def existing_spark(master: str) -> SparkTarget:
    """A cluster someone else runs (`--spark-master spark://...`): its executors need this
    venv's Python at the same path and this checkout on their PYTHONPATH."""
    conf = ("--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}", "--conf", "spark.ui.enabled=false")
    return SparkTarget(master, conf, dict(child_env(), PYSPARK_PYTHON=sys.executable,
                                          PYSPARK_DRIVER_PYTHON=sys.executable))


def spark_submit(spark: SparkTarget, directory: Path, controller: str, trigger: str,
                 log_name: str, idle_s: float = INGEST_IDLE_S) -> subprocess.Popen[bytes]:
    """ingest_to_table under spark-submit, routes from the controller, output in
    <dir>/logs/<log_name>."""
    argv = [str(Path(sys.executable).parent / "spark-submit"), "--master", spark.master,
            *spark.conf,
            str(INGEST_SCRIPT), "--controller", controller, "--topics", TOPIC,
            "--client-config", str(_client_properties),
            "--table", str(directory / "orders_table"),
            "--checkpoint", str(directory / "checkpoints" / "orders_table"),
            "--trigger", trigger, "--body-json-schema", BODY_SCHEMA,
            "--option", "readFromReplicas=true",
            "--idle-timeout-s", str(idle_s), "--timeout-s", str(INGEST_TIMEOUT_S)]
    log_path = directory / "logs" / log_name
    say(f"spark-submit --master {spark.master} ingest_to_table ({trigger}), log in {log_path}")
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=spark.env,
                                cwd=ROOT)


def ingest_committed(process: subprocess.Popen[bytes], table: Path, log_path: Path) -> bool:
    """True once the Delta table has a commit; SystemExit with the log's tail if the ingest
    exited before that."""
    if process.poll() is not None:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise SystemExit(f"demo: ingest exited {process.returncode} early:\n{tail}")
    log = table / "_delta_log"
    return log.exists() and any(log.glob("*.json"))


def table_orders(table: Path) -> tuple[int, dict[int, int]]:
    """(rows, order -> rows holding it) of the Delta table, read with deltalake."""
    if not (table / "_delta_log").exists():
        return 0, {}
    orders = DeltaTable(str(table)).to_pyarrow_table(columns=["order"]).column("order")
    return len(orders), {c["values"]: c["counts"] for c in pc.value_counts(orders).to_pylist()}


def wait_ingest(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.terminate()
        return process.wait(timeout=30)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


# -- tier and rejoin -------------------------------------------------------------------------------
def tier_manifest(directory: Path) -> dict[str, Any]:
    """The newest manifest version of the replica set in the demo's file:// tier."""
    versions = sorted((directory / "tier" / REPLICA_SET / "manifest").glob("*.json"))
    return json.loads(versions[-1].read_text()) if versions else {"segments": []}


def tier_by_epoch(manifest: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for segment in manifest["segments"]:
        counts[str(segment["epoch"])] = counts.get(str(segment["epoch"]), 0) + 1
    return dict(sorted(counts.items()))


def wait_for_tier(endpoint: str, deadline_s: float) -> dict[str, Any]:
    """The master's tier stats once segments are listed and no sealed one waits (upload lag
    0), or as they are at the deadline."""
    def caught_up() -> dict[str, Any] | None:
        stats = (probe(endpoint) or {}).get("tiered", {})
        pending = stats.get("upload", {}).get("pending_segments", 1)
        return stats if stats.get("tier_segments", 0) >= 1 and pending == 0 else None

    try:
        return wait_for("tier upload lag 0", caught_up, deadline_s)
    except SystemExit as err:
        say(str(err))
        return (probe(endpoint) or {}).get("tiered", {})


def wait_rejoined(old: dict[str, Any], master_endpoint: str) -> dict[str, Any]:
    """The restarted old master's broker_info once it follows the new master, holds its whole
    log and is back in its SyncStateSet (or as it is at the deadline)."""
    def rejoined() -> dict[str, Any] | None:
        info, master = probe(old["endpoint"]), probe(master_endpoint)
        if (info and master and info.get("role") == "SLAVE"
                and info["max_log_position"] == master["max_log_position"]
                and len(master.get("sync_state_set", ())) == REPLICAS):
            return info
        return None

    try:
        return wait_for(f"{old['name']} back in sync", rejoined, ROLES_WAIT_S)
    except SystemExit as err:
        say(str(err))
        return probe(old["endpoint"]) or {"role": "DOWN"}


def print_tier(manifest: dict[str, Any], writers: dict[int, str]) -> None:
    say(f"tier {REPLICA_SET}: manifest version {manifest.get('version')}, "
        f"{len(manifest['segments'])} segments (object name: base log_position.epoch)")
    for segment in manifest["segments"]:
        messages = sum(queue[3] for queue in segment.get("queues", ()))
        print(f"      {segment['base_log_position']:020d}.{segment['epoch']:010d}.seg "
              f"{segment['data_size_bytes']:>7} B {messages:>5} msgs  uploaded by "
              f"{writers.get(segment['epoch'], '?')}", flush=True)


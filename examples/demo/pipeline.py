"""The demo (`python3 build.py demo`): Spark ingest through an automatic master failover.

A controller-mode replica set, an order stream, Spark ingest into Delta, a master SIGKILL the
controller recovers from by election, the old master back as a slave, tiering.

What it runs, all on 127.0.0.1 with data under one directory (default `./demo-data`); with
`--hosts` (root) every broker and controller on a test host of its own (network namespaces,
198.18.0.0/15 addresses: `rocketha-cluster up --hosts`) and the ingest on a Spark standalone
cluster (spark_app/standalone.py: a master on the root namespace's address on that network,
two workers on two more test hosts), so executors reach the brokers only through advertised
addresses
(`--spark-master local|standalone|spark://HOST:PORT` chooses Spark independently):

1. `rocketha-cluster up --controllers 1 --replica-sets 1 --replicas 3`: one controller and one
   replica set of three brokers in controller mode (the controller names the master), quorum
   inSyncReplicas=2 with adaptive degradation down to 1, slaves serving reads, 256 KiB
   CommitLog segments (small, so a short demo seals several) tiered to `<dir>/tier` (file://,
   shared by the set). Secured (the tool's default): mutual TLS on every link, authentication
   and ACLs on; every client here, and the ingest (`--client-config`), reads
   `<dir>/client.properties` (TLS files and the generated admin user's keys).
2. `ingest_to_table` under real `spark-submit` streams the `orders` topic into a Delta table
   (deltalake engine: Maven is unreachable here), with its routes from the controller.
3. Orders (keyed by customer, tagged by kind) go in through a controller-configured,
   idempotent producer (`Producer(idempotent=True)`: each batch carries its sequence, so a
   batch the dead master had replicated but not acknowledged is not stored twice when it is
   sent again). Half way, once the ingest has committed rows, the master is SIGKILLed while
   orders stream in and is not restarted: the controller elects a slave of the SyncStateSet
   and the producer follows. `failover_s` is the producer's view: SIGKILL to the first PUT_OK
   from the new master. Three quarters in, the old broker is started again; it must rejoin as
   a SLAVE of the new master (its fork truncated by the handshake) and catch up.
4. The new master now runs the tier uploader: it waits until every sealed segment is in the
   tier (upload lag 0), which must hold segments of the new master's epoch, for the ingest to
   catch up and stop, then reruns the ingest from its checkpoint (`available-now`) to show a
   restart adds nothing.

The last line printed is one JSON object: `produced_acked`, `table_rows`,
`table_distinct_orders`, `failover_s`, `tiered_segments`, `master_before`, `master_after`,
`old_master_rejoined_as`, `rerun_rows`, ... Exit status 0 only when every order was
acknowledged and is in the table exactly once (after the rerun too), the old master rejoined
as a SLAVE in sync, and the tier grew under the new master; each failed check is printed
before the JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from connector import Admin, Producer
from connector.protocol import RocketHAError
from examples.demo.harness import (
    INGEST_IDLE_S,
    INGEST_TIMEOUT_S,
    REPLICAS,
    ROLES_WAIT_S,
    TOPIC,
    SparkTarget,
    begin,
    client,
    cluster,
    existing_spark,
    fresh_directory,
    full_set_master,
    ingest_committed,
    local_spark,
    print_tier,
    probe,
    processes,
    say,
    spark_submit,
    standalone_spark,
    stop_process,
    table_orders,
    tier_by_epoch,
    tier_manifest,
    wait_for,
    wait_for_tier,
    wait_ingest,
    wait_rejoined,
)

__all__ = ["main"]

KINDS = ("created", "paid", "shipped", "cancelled")
CUSTOMERS = 500
QUEUES = 4
CLUSTER_SETTINGS = (
    "flushDiskType=ASYNC_FLUSH", "inSyncReplicas=2", "enableAutoInSyncReplicas=true",
    "minInSyncReplicas=1", "slaveReadEnable=true", "mappedFileSizeCommitLog=262144",
    "maxMessageSize=65536",
    "tieredStoreEnable=true", "tieredUploadIntervalMs=500",
)
INGEST_START_WAIT_S = 300.0  # spark-submit until its first commit (a loaded 2-core machine)
TIER_WAIT_S = 60.0
SEND_DEADLINE_MS = 60_000  # one send_batch call, its retries through the failover included
KILL_DELAY_S = 0.02  # after the producer resumes, so the SIGKILL lands amid its batches


# -- orders and the failover -----------------------------------------------------------------------
def order_batch(rng: random.Random, first: int, count: int) -> list[dict[str, object]]:
    """Orders first..first+count-1, keyed by customer and tagged by kind."""
    rows: list[dict[str, object]] = []
    for seq in range(first, first + count):
        customer = f"customer-{rng.randrange(CUSTOMERS)}"
        kind = rng.choice(KINDS)
        body = json.dumps({"order": seq, "customer": customer, "kind": kind,
                           "amount_cents": rng.randrange(100, 100_000)}).encode()
        rows.append({"body": body, "key": customer, "tags": kind})
    return rows


def _pid_running(pid: int) -> bool:
    """False once `pid` is gone or a zombie (a SIGKILLed orphan not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


class Failover:
    """The chaos side, on its own thread so the producer keeps sending through it: SIGKILL
    the master once `kill` is set, watch for the controller's new master, and start the old
    broker again once `restart` is set. Nothing here helps the set recover."""

    def __init__(self, directory: Path, brokers: list[dict[str, Any]],
                 master: dict[str, Any]) -> None:
        self.directory = directory
        self.old = next(b for b in brokers if b["endpoint"] == master["endpoint"])
        self.old_epoch = int(master["master_epoch"])
        self.others = [b["endpoint"] for b in brokers if b is not self.old]
        self.kill = threading.Event()
        self.restart = threading.Event()
        self.killed_at: float | None = None  # monotonic
        self.tier_segments_at_kill = 0
        self.new_master: dict[str, Any] | None = None  # its broker_info
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="failover", daemon=True)

    def start(self) -> Failover:
        self._thread.start()
        return self

    def join(self) -> None:
        self.kill.set()
        self.restart.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            self.kill.wait()
            time.sleep(KILL_DELAY_S)
            pid = int(self.old["pid"])
            self.tier_segments_at_kill = len(tier_manifest(self.directory)["segments"])
            os.kill(pid, signal.SIGKILL)
            self.killed_at = time.monotonic()
            say(f"SIGKILL master {self.old['name']} (pid {pid}) while orders stream in")
            self.new_master = wait_for("new master", self._elected, ROLES_WAIT_S)
            say(f"  the controller made {self.new_master['endpoint']} master (epoch "
                f"{self.new_master['master_epoch']}) "
                f"{time.monotonic() - self.killed_at:.2f}s after the SIGKILL")
            self.restart.wait()
            wait_for("exit of the killed master", lambda: not _pid_running(pid), 10.0)
            cluster("up", "--dir", str(self.directory))  # starts what is down: the old master
            say(f"restarted {self.old['name']} (the old master)")
        except BaseException as err:  # noqa: BLE001 - handed to the main thread by join()
            self.error = err

    def _elected(self) -> dict[str, Any] | None:
        for endpoint in self.others:
            info = probe(endpoint)
            if info and info.get("role") == "MASTER" and info["master_epoch"] > self.old_epoch:
                return info
        return None


@dataclasses.dataclass
class ProduceReport:
    acked: int = 0
    failover_s: float = 0.0
    new_master_endpoint: str = ""
    send_error: str = ""  # why the producer stopped early
    seconds: float = 0.0


def produce(controller: str, orders: int, batch: int, failover: Failover,
            ingest_ready: Callable[[], bool]) -> ProduceReport:
    """Every order through a controller-configured, idempotent producer (a retry of a batch
    the dead master had replicated is answered from the new master's idempotence table, not
    stored twice); the master is SIGKILLed half way (once the ingest has committed rows) and
    restarted three quarters in."""
    config = client(controller=controller, send_deadline_ms=SEND_DEADLINE_MS)
    rng = random.Random(7)
    report = ProduceReport()
    started = time.monotonic()
    with Producer(config, idempotent=True) as producer:
        for first in range(0, orders, batch):
            if first >= orders // 2 and not failover.kill.is_set():
                producer.close()  # no stream idles past its deadline while the ingest starts
                say(f"{report.acked} orders acknowledged; waiting for the ingest's first commit")
                wait_for("Delta commit from the ingest", ingest_ready, INGEST_START_WAIT_S)
                failover.kill.set()
            if first >= orders * 3 // 4 and report.failover_s:
                failover.restart.set()
            rows = order_batch(rng, first, min(batch, orders - first))
            endpoint = send(producer, rows, report)
            if not endpoint:
                say(f"orders {first}.. not acknowledged ({report.send_error}): the producer "
                    "stops")
                break  # an idempotent producer stops at its first failure
            report.acked += len(rows)
            killed_at = failover.killed_at
            if killed_at is not None and not report.failover_s \
                    and endpoint != failover.old["endpoint"]:
                report.failover_s = time.monotonic() - killed_at
                report.new_master_endpoint = endpoint
                say(f"  first PUT_OK from the new master {endpoint} "
                    f"{report.failover_s:.2f}s after the SIGKILL")
    report.seconds = time.monotonic() - started
    failover.restart.set()
    return report


def send(producer: Producer, rows: list[dict[str, object]], report: ProduceReport) -> str:
    """The endpoint that answered PUT_OK for every row, or "" (and `report.send_error`).
    Sending again after a failure would give the rows a new sequence, so the caller stops."""
    try:
        results = producer.send_batch(TOPIC, rows)
    except RocketHAError as err:  # retriable errors past the deadline, or a fatal one
        report.send_error = f"{type(err).__name__}: {err}"
        return ""
    if not all(result.ok for result in results):
        report.send_error = f"statuses {sorted({result.status for result in results})}"
        return ""
    return producer.endpoint


# -- the run ---------------------------------------------------------------------------------------
def exactly_once_problems(orders: int, acked: int, counts: dict[int, int]) -> list[str]:
    """What keeps the table from holding the acknowledged orders (0..acked-1: the producer
    stops at its first failure) exactly once each, and nothing else."""
    problems = []
    missing = [order for order in range(acked) if order not in counts]
    duplicated = sorted(order for order, count in counts.items() if count > 1)
    strangers = sorted(order for order in counts if not 0 <= order < orders)
    if missing:
        problems.append(f"{len(missing)} acknowledged orders missing from the table "
                        f"(first {missing[:10]})")
    if duplicated:
        problems.append(f"{len(duplicated)} orders more than once in the table "
                        f"(first {duplicated[:10]})")
    if strangers:
        problems.append(f"{len(strangers)} unknown orders in the table (first {strangers[:10]})")
    return problems


@dataclasses.dataclass
class Outcome:
    """What the run saw, for the checks and the summary."""

    orders: int
    report: ProduceReport
    master_before: str
    master_after: str
    master_after_endpoint: str
    epochs: tuple[int, int]  # master epoch before, after
    rejoined: dict[str, Any]
    tier: dict[str, Any]
    manifest: dict[str, Any]
    tier_segments_at_kill: int
    ingest: tuple[int, int, dict[int, int]]  # exit code, rows, counts
    rerun: tuple[int, int, dict[int, int]]
    duplicates_dropped: int | None

    def problems(self) -> list[str]:
        acked = self.report.acked
        found = exactly_once_problems(self.orders, acked, self.ingest[2])
        found += [f"after the rerun: {problem}" for problem in
                  exactly_once_problems(self.orders, acked, self.rerun[2])]
        if acked != self.orders:
            found.append(f"only {acked} of {self.orders} orders acknowledged")
        if self.report.new_master_endpoint != self.master_after_endpoint:
            found.append(f"the first PUT_OK after the SIGKILL came from "
                         f"{self.report.new_master_endpoint or 'nobody'}, not from the "
                         f"elected master {self.master_after_endpoint}")
        if self.rejoined.get("role") != "SLAVE":
            found.append(f"the old master {self.master_before} is {self.rejoined.get('role')}, "
                         "not a SLAVE")
        by_epoch = tier_by_epoch(self.manifest)
        if (not by_epoch.get(str(self.epochs[1]))
                or len(self.manifest["segments"]) <= self.tier_segments_at_kill):
            found.append(f"the tier did not grow under the new master (epoch "
                         f"{self.epochs[1]}): {self.tier_segments_at_kill} segments at the "
                         f"kill, now {by_epoch}")
        if self.ingest[0] != 0 or self.rerun[0] != 0:
            found.append(f"ingest exited {self.ingest[0]}, rerun exited {self.rerun[0]}")
        return found

    def summary(self, directory: Path, demo_s: float) -> dict[str, Any]:
        segments = self.manifest["segments"]
        return {
            "produced_acked": self.report.acked, "orders": self.orders,
            "table_rows": self.ingest[1], "table_distinct_orders": len(self.ingest[2]),
            "failover_s": round(self.report.failover_s, 3),
            "failover_mode": "controller election (master SIGKILLed, not restarted)",
            "master_before": self.master_before, "master_after": self.master_after,
            "master_epoch_before": self.epochs[0], "master_epoch_after": self.epochs[1],
            "old_master_rejoined_as": self.rejoined.get("role"),
            "duplicates_dropped": self.duplicates_dropped,
            "send_error": self.report.send_error,
            "tiered_segments": len(segments),
            "tiered_bytes": sum(segment["data_size_bytes"] for segment in segments),
            "tiered_segments_at_kill": self.tier_segments_at_kill,
            "tier_segments_by_epoch": tier_by_epoch(self.manifest),
            "tier_upload_pending": self.tier.get("upload", {}).get("pending_segments"),
            "tier_url": self.tier.get("url"),
            "ingest_exit": self.ingest[0], "rerun_exit": self.rerun[0],
            "rerun_rows": self.rerun[1] - self.ingest[1],
            "produce_s": round(self.report.seconds, 2), "demo_s": round(demo_s, 1),
            "data_dir": str(directory),
        }


def run(args: argparse.Namespace, directory: Path, spark: SparkTarget,
        spark_jobs: list[subprocess.Popen[bytes]]) -> Outcome:
    """Steps 2-4 of the module docstring, on the cluster `main` started."""
    brokers, controllers = processes(directory)
    master = wait_for("master with a full SyncStateSet", lambda: full_set_master(brokers),
                      ROLES_WAIT_S)
    names = {broker["endpoint"]: broker["name"] for broker in brokers}
    controller = controllers[0]["endpoint"]
    say(f"controller {controller} named {names[master['endpoint']]} master (epoch "
        f"{master['master_epoch']}), SyncStateSet {master['sync_state_set']}")
    Admin(client(controller=controller)).create_topic(TOPIC, queues=QUEUES)
    table, log_path = directory / "orders_table", directory / "logs" / "ingest.log"
    ingest = spark_submit(spark, directory, controller, "processing:2s", "ingest.log",
                          args.ingest_idle_s)
    spark_jobs.append(ingest)
    failover = Failover(directory, brokers, master).start()
    report = produce(controller, args.orders, args.batch, failover,
                     lambda: ingest_committed(ingest, table, log_path))
    failover.join()
    new_master = failover.new_master
    assert new_master is not None
    say(f"{report.acked} of {args.orders} orders acknowledged in {report.seconds:.1f}s")
    say(f"waiting for {failover.old['name']} to follow {names[new_master['endpoint']]} and "
        "catch up")
    rejoined = wait_rejoined(failover.old, new_master["endpoint"])
    say(f"{failover.old['name']} rejoined as {rejoined.get('role')} of "
        f"{names[new_master['endpoint']]} (epoch {rejoined.get('master_epoch')}, log end "
        f"{rejoined.get('max_log_position')})")
    say("waiting for the new master's uploader (tier upload lag 0)")
    tier = wait_for_tier(new_master["endpoint"], TIER_WAIT_S)
    manifest = tier_manifest(directory)
    print_tier(manifest, {master["master_epoch"]: names[master["endpoint"]],
                          new_master["master_epoch"]: names[new_master["endpoint"]]})
    say(f"waiting for the ingest to catch up and stop ({args.ingest_idle_s:.0f}s without rows)")
    ingest_rc = wait_ingest(ingest, INGEST_TIMEOUT_S)
    rows, counts = table_orders(table)
    say(f"ingest exited {ingest_rc}; table holds {rows} rows ({len(counts)} orders)")
    rerun = spark_submit(spark, directory, controller, "available-now", "ingest-rerun.log")
    spark_jobs.append(rerun)
    rerun_rc = wait_ingest(rerun, INGEST_TIMEOUT_S)
    stats = Admin(client(brokers=(new_master["endpoint"],), controller=None)).broker_stats()
    return Outcome(
        orders=args.orders, report=report, master_before=names[master["endpoint"]],
        master_after=names[new_master["endpoint"]], master_after_endpoint=new_master["endpoint"],
        epochs=(master["master_epoch"], new_master["master_epoch"]), rejoined=rejoined,
        tier=tier, manifest=manifest, tier_segments_at_kill=failover.tier_segments_at_kill,
        ingest=(ingest_rc, rows, counts), rerun=(rerun_rc, *table_orders(table)),
        duplicates_dropped=stats.get("idempotence", {}).get("duplicates_dropped"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"))
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--ingest-idle-s", type=float, default=INGEST_IDLE_S,
                        help="the streaming ingest stops once it saw no rows for this long")
    parser.add_argument("--hosts", action="store_true",
                        help="every broker and controller on a test host of its own (root; "
                        "`rocketha-cluster up --hosts`), the ingest on a Spark standalone "
                        "cluster")
    parser.add_argument("--spark-master", default=None,
                        help="local (default without --hosts), standalone (a master and two "
                        "workers started for the demo; default with --hosts) or spark://HOST:PORT "
                        "of a running cluster")
    args = parser.parse_args(argv)
    if args.orders < 4 * args.batch:
        parser.error("--orders must be at least 4 batches (kill at 1/2, restart at 3/4)")
    spark_master = args.spark_master or ("standalone" if args.hosts else "local")
    if spark_master not in ("local", "standalone") and not spark_master.startswith("spark://"):
        parser.error(f"--spark-master {spark_master!r}: local, standalone or spark://HOST:PORT")
    directory = args.dir.resolve()
    fresh_directory(directory)
    client_properties = directory / "client.properties"
    started = begin(client_properties)
    say(f"demo data under {directory}")
    cluster("up", "--dir", str(directory), "--controllers", "1", "--replica-sets", "1",
            "--replicas", str(REPLICAS),
            *(["--hosts", "--spare-hosts", "2"] if args.hosts else []),
            *[item for setting in CLUSTER_SETTINGS for item in ("--set", setting)],
            "--set", f"tieredStoreUrl=file://{directory / 'tier'}")
    where = " each on a test host of its own" if args.hosts else ""
    say(f"cluster up: controller-n1 and broker-a-0/1/2 (controller mode){where}, mutual TLS "
        f"on every link, authentication on, client settings and the admin's keys in "
        f"{client_properties}")
    spark_jobs: list[subprocess.Popen[bytes]] = []
    spark: SparkTarget | None = None
    try:
        if spark_master == "local":
            spark = local_spark()
        elif spark_master == "standalone":
            spark = standalone_spark(directory)
        else:
            spark = existing_spark(spark_master)
        outcome = run(args, directory, spark, spark_jobs)
    finally:
        for job in spark_jobs:
            stop_process(job)
        if spark is not None and spark.cluster is not None:
            spark.cluster.stop()
        cluster("down", "--dir", str(directory))
    problems = outcome.problems()
    for problem in problems:
        say(f"FAILED: {problem}")
    print(json.dumps(outcome.summary(directory, time.monotonic() - started), sort_keys=True),
          flush=True)
    return 0 if not problems else 1


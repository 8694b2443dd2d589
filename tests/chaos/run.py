"""`python3 build.py chaos`: a fault campaign on test hosts, judged by tests/chaos/checker.py.

    python3 build.py chaos [--minutes 3] [--seed 1]
        [--faults kill,pause,partition,loss,link,power,corrupt,disk[,shape,handover,restart,
                  add-set,drain]]
        [--controllers 3|5] [--producers 3] [--rate 40] [--tolerate KIND,...] [--spark]
        [--keep-data] [--out DIR]
    python3 build.py chaos --resume --out DIR     # the end of a run that stopped in a step

The cluster: `rocketha-cluster up --hosts` with 3 (or 5) controllers and 2 replica sets of 3
brokers, each process on its own test host (network namespaces on a bridge, 198.18.0.0/15;
clients in the root namespace), the cluster tool's quorum (inSyncReplicas 2 of 3, degrading to 1)
and short timers. The workload (tests/chaos/workload.py) runs throughout: idempotent producers
through the controllers' routes, one consumer per replica set in a consumer group committing
offsets, an observer of the controllers. The nemesis (tests/chaos/nemesis.py) plays the
seed's schedule: a fault, held a few seconds, healed, a quiet time, the next. With `power`
every broker's store is on LazyFS (FUSE, unsynced writes lost on a power loss); with `disk`
the `<set>-2` brokers' stores are on a 256 MiB tmpfs that a fault fills
(tests/chaos/disk_faults.py).

At the end: every fault healed, every set (one `add-set` made too) with a master and a full
SyncStateSet, the producers stopped, the consumers given time to catch up; then the final
drain (every queue of every set read from its start on its master once its confirm position
reached its log end) and the replica digests (each member's CommitLog bytes up to the
master's confirm position). The checker judges the history; the last line printed is the
JSON report:
    valid, seed, faults_by_kind, acknowledged, lost, duplicated, inconsistent_offsets,
    rto_p99_s, timeline (the PNG), html, history, and the checker's counts.
Exit 1 on any violation (the message names the first one and the seed), 2 when the run itself
failed (a step timed out, the cluster would not start).

`--resume`: a run that failed in a harness step (exit 2: a step timed out) kept its stores and
history; this brings its cluster up again from them (the LazyFS stores' backing directories
put back in place; a `disk` broker's tmpfs store is gone with its unmount, so it comes back
empty and catches up from its master like a replaced disk), then does the run's end (settle,
observe, drain, digests) appending to the same history, and judges the whole of it.

Bounded: the fault loop ends after --minutes; each step has its deadline (wait_for); an alarm
ends the whole run after --minutes + FINISH_S; the cluster and its hosts are removed in
`finally`, whatever happened.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from connector import Admin, ClientConfig, Consumer
from connector.protocol import RocketHAError
from tests.chaos.checker import check
from tests.chaos.disk_faults import StoreMounts
from tests.chaos.history import History, read_history
from tests.chaos.nemesis import KINDS, OPT_IN_KINDS, Nemesis, schedule
from tests.chaos.report import write_html, write_timeline
from tests.chaos.spark_ingest import SparkIngest
from tests.chaos.workload import (
    TOPIC,
    ConsumerWorker,
    Observer,
    ProducerWorker,
    TopicRoutes,
    client_config,
)
from tests.integration.failover_cluster import (
    QUEUES,
    FailoverCluster,
    commitlog_bytes,
    commitlog_segments,
)
from tests.support.lazyfs import fuse_unavailable_reason

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER_FAST = {"controllerHeartbeatTimeoutMs": "1500", "scanNotActiveBrokerIntervalMs": "200",
                   "raftElectionTimeoutTicks": "6"}
QUORUM = {"inSyncReplicas": "2", "enableAutoInSyncReplicas": "true", "minInSyncReplicas": "1"}
REPLICA_SETS = ("broker-a", "broker-b")
SETTLE_S = 60.0  # after a heal: both sets have a master again
FINISH_S = 600.0  # the whole run's alarm: --minutes plus this
SPARK_FINISH_S = 900.0  # plus this with --spark (the cluster's start, both ingest runs)
CATCH_UP_S = 5.0  # consumers read on after the producers stopped


class RunTimeout(Exception):
    """The run's alarm went off."""


def _alarm(signum: int, frame: Any) -> None:
    raise RunTimeout(f"the run took longer than its limit (signal {signum})")


def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    history = History(out / "history.jsonl")
    cluster = mounts = spark = None
    workers: list[Any] = []
    try:
        cluster = FailoverCluster(out / "cluster", controllers=args.controllers, replica_sets=2,
                                  replicas=3, hosts=True, controller_settings=CONTROLLER_FAST,
                                  **QUORUM)
        if "power" in args.faults or "disk" in args.faults:
            mounts = StoreMounts(
                cluster, lazy=sorted(cluster.brokers) if "power" in args.faults else [],
                limited=[f"{name}-2" for name in REPLICA_SETS] if "disk" in args.faults else [])
        for name in REPLICA_SETS:
            master, _ = cluster.wait_master(name, timeout_s=SETTLE_S)
            cluster.wait_full_sync_state_set(master, 3, timeout_s=SETTLE_S)
            Admin(ClientConfig(brokers=(cluster.endpoint(master),))).create_topic(
                TOPIC, queues=QUEUES)
        config = client_config(cluster.controller_addr)
        if args.spark:
            assert cluster.network is not None
            spark = SparkIngest(out, cluster.network.root_address,
                                cluster.controller_addr).start()
        run_id = "r" + uuid.uuid4().hex[:6]
        sets = list(REPLICA_SETS)  # add-set appends (tests/chaos/planned.py)
        observer = Observer(history, cluster.controller_addr,
                            [cluster.endpoint(n) for n in cluster.controllers], sets)
        routes = TopicRoutes(history, cluster.controller_addr)
        producers = [ProducerWorker(history, config, run_id, i, args.rate, routes)
                     for i in range(args.producers)]
        consumers = [ConsumerWorker(history, config, name, i, QUEUES)
                     for i, name in enumerate(sets)]
        workers = [observer, routes, *producers, *consumers]
        for worker in workers:
            worker.start()

        def on_new_set(name: str) -> None:
            consumer = ConsumerWorker(history, config, name, len(consumers), QUEUES)
            consumer.start()
            consumers.append(consumer)
            workers.append(consumer)
        faults = _fault_loop(args, cluster, history, mounts, sets, on_new_set)
        _settle(cluster, sets)
        for producer in producers:
            producer.stop()
        time.sleep(CATCH_UP_S)
        for worker in [*consumers, observer, routes]:
            worker.stop()
        broken = [w for w in workers if w.error is not None or w.alive]
        assert not broken, [(w._thread.name, repr(w.error)) for w in broken]
        observer.observe()
        _drain(cluster, history, sets)
        if spark is not None:
            print(f"spark ingest: {spark.finish(history)}", flush=True)
        _digests(cluster, history, sets)
    finally:
        for worker in workers:
            worker.stop_event.set()
        if spark is not None:
            spark.close()
        if cluster is not None:
            cluster.down()
        if mounts is not None:
            mounts.close()
        history.close()
    return _judge(args, out, history, faults)


def resume(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The end of a run that stopped in a step, on its kept stores (module docstring)."""
    directory = out / "cluster"
    for backing in sorted((directory / "data").glob("*.backing")):
        store = backing.with_name(backing.name.removesuffix(".backing"))
        if store.is_dir() and not store.is_mount() and not any(store.iterdir()):
            store.rmdir()  # LazyFS's empty mount point: the store goes back where it was
            backing.rename(store)
    manifest = json.loads((directory / "cluster.json").read_text())
    history = History(out / "history.jsonl", events=read_history(out / "history.jsonl"),
                      append=True)
    cluster = None
    sets = sorted({broker["set"] for broker in manifest["brokers"]})  # with any add-set's
    try:
        cluster = FailoverCluster(directory, controllers=len(manifest["controllers"]),
                                  replica_sets=len(sets), replicas=3, hosts=True,
                                  controller_settings=CONTROLLER_FAST, **QUORUM)
        _settle(cluster, sets)
        Observer(history, cluster.controller_addr,
                 [cluster.endpoint(n) for n in cluster.controllers], sets).observe()
        _drain(cluster, history, sets)
        _digests(cluster, history, sets)
    finally:
        if cluster is not None:
            cluster.down()
        history.close()
    return _judge(args, out, history, None)


def _judge(args: argparse.Namespace, out: Path, history: History,
           faults: Any) -> dict[str, Any]:
    result = check(history.events, tolerate=args.tolerate)
    if result.valid and not args.keep_data:
        shutil.rmtree(out / "cluster", ignore_errors=True)  # the stores: kept when invalid
    report = result.to_json()
    png = write_timeline(history.events, out / "timeline.png",
                         f"rocketha chaos, seed {args.seed}, {args.minutes} min: "
                         f"{'valid' if result.valid else 'INVALID'}")
    report.update({"seed": args.seed, "minutes": args.minutes, "faults_skipped": faults,
                   "timeline": str(png), "history": str(out / "history.jsonl"),
                   "html": str(out / "report.html"), "rto": result.rto})
    write_html(report, png, out / "report.html")
    return report


def _fault_loop(args: argparse.Namespace, cluster: FailoverCluster, history: History,
                mounts: StoreMounts | None, sets: list[str],
                on_new_set: Callable[[str], None]) -> int:
    """Plays the seed's schedule until --minutes are over and --min-faults were injected (on a
    busy machine each fault's settling takes longer, so a short campaign would otherwise inject
    fewer; the run's alarm still bounds it); returns the faults skipped (their target did not
    exist at that moment, e.g. no master)."""
    nemesis = Nemesis(cluster, history, sets, mounts, on_new_set)
    plans = schedule(args.seed, tuple(args.faults))
    end_s = time.monotonic() + args.minutes * 60
    skipped = injected = 0
    time.sleep(3.0)  # a fault-free start: the latency outside faults
    while time.monotonic() < end_s or injected < args.min_faults:
        plan = next(plans)
        heal = nemesis.inject(plan)
        if heal is None:
            skipped += 1
            time.sleep(1.0)
            continue
        injected += 1
        print(f"{time.strftime('%H:%M:%S')} {plan.name} held {plan.hold_s}s", flush=True)
        try:
            time.sleep(plan.hold_s)
        finally:
            heal()
        _settle(cluster, sets)
        time.sleep(plan.quiet_s)
    return skipped


def _settle(cluster: FailoverCluster, sets: list[str]) -> None:
    """Healed for good: every replica set has a master (bounded)."""
    for name in sets:
        cluster.wait_master(name, timeout_s=SETTLE_S)


def _drain(cluster: FailoverCluster, history: History, sets: list[str]) -> None:
    """Every queue of every set from its start, on its master at rest (process "drain")."""
    for name in sets:
        master, _ = cluster.wait_master(name, timeout_s=SETTLE_S)
        cluster.wait_full_sync_state_set(master, 3, timeout_s=SETTLE_S)
        cluster.wait_confirm_at_end(master)
        config = ClientConfig(brokers=(cluster.endpoint(master),), retries_max=5,
                              request_timeout_ms=5000)
        consumer = Consumer(config)
        for queue in Admin(config).queue_offsets(TOPIC):
            queue_id, queue_offset = queue["queue_id"], queue["min_queue_offset"]
            for _ in range(100_000):  # bounded: each pull moves forward or the loop ends
                if queue_offset >= queue["max_queue_offset"]:
                    break
                history.add("drain", "invoke", "poll", set=name, queue=queue_id,
                            offset=queue_offset)
                result = consumer.pull(TOPIC, queue_id, queue_offset, max_messages=1024)
                offsets = result.table.column("queue_offset").to_pylist()
                bodies = result.table.column("body").to_pylist()
                history.add("drain", "ok", "poll", set=name, queue=queue_id,
                            msgs=[[o, b.decode(errors="replace")]
                                  for o, b in zip(offsets, bodies, strict=True)],
                            next=result.next_queue_offset)
                if result.next_queue_offset <= queue_offset:
                    break
                queue_offset = result.next_queue_offset
            assert queue_offset >= queue["max_queue_offset"], (name, queue, queue_offset)


def _digests(cluster: FailoverCluster, history: History, sets: list[str]) -> None:
    """Each member's CommitLog [start, the master's confirm position) as SHA-256, where start is
    the highest first segment among the members (retention deletes old segments on each member
    by its own clock, so a long run's members start at different segments)."""
    for name in sets:
        master, _ = cluster.wait_master(name, timeout_s=SETTLE_S)
        end = cluster.wait_confirm_at_end(master)
        members = cluster.members(name)
        for member in members:
            if member != master:
                cluster.wait_converged(member, master)
        start = max(commitlog_segments(cluster.store_dir(member))[0][0] for member in members)
        for member in members:
            digest = hashlib.sha256(commitlog_bytes(cluster.store_dir(member), end, start))
            history.add("final", "ok", "replica_digest", set=name, broker=member, start=start,
                        end=end, sha256=digest.hexdigest())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--min-faults", type=int, default=0,
                        help="keep injecting past --minutes until this many faults were injected")
    parser.add_argument("--faults", type=lambda text: text.split(","), default=list(KINDS))
    parser.add_argument("--controllers", type=int, choices=(3, 5), default=3,
                        help="controller quorum size: 5 makes a bridge or ring over the "
                        "controllers leave a majority that can still elect (Jepsen's shapes)")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--rate", type=float, default=40.0, help="sends per second, each")
    parser.add_argument("--tolerate", type=lambda text: text.split(","), default=[],
                        help="violation kinds counted but not judged, e.g. commit_regressions")
    parser.add_argument("--spark", action="store_true",
                        help="also a structured-streaming ingest into a Delta table on a Spark "
                        "standalone cluster, judged exactly-once (tests/chaos/spark_ingest.py)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the brokers' stores after a valid run too")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the history, PNG and HTML go (default .chaos/<time>-s<seed>)")
    parser.add_argument("--resume", action="store_true",
                        help="end and judge the run in --out that stopped in a step (its stores "
                        "kept): see the module docstring")
    args = parser.parse_args(argv)
    if args.resume and (args.out is None or not (args.out / "cluster" / "cluster.json").exists()):
        parser.error("--resume needs --out DIR of a run that kept its cluster directory")
    unknown = set(args.faults) - {*KINDS, *OPT_IN_KINDS}
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {','.join(KINDS)} "
                     f"(default) and {','.join(OPT_IN_KINDS)}")
    if "power" in args.faults and fuse_unavailable_reason() is not None:
        parser.error(f"power faults need LazyFS: {fuse_unavailable_reason()} (leave out power)")
    out = args.out or ROOT / ".chaos" / f"{time.strftime('%Y%m%dT%H%M%S')}-s{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(args.minutes * 60 + FINISH_S + (SPARK_FINISH_S if args.spark else 0)))
    try:
        report = resume(args, out) if args.resume else run(args, out)
    except (RunTimeout, AssertionError, RocketHAError, OSError) as err:
        print(f"chaos seed {args.seed}: the run failed: {err!r}"[:3000], file=sys.stderr)
        print(json.dumps({"valid": None, "seed": args.seed, "error": repr(err)[:2000],
                          "history": str(out / "history.jsonl")}))
        return 2
    finally:
        signal.alarm(0)
    print(json.dumps(report, sort_keys=True))
    if not report["valid"]:
        print(f"chaos seed {args.seed}: INVALID: {report['first_violation']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

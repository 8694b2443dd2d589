"""Offset-commit benchmark: what a consumer-group commit costs now that it is a quorum write.

    python3 build.py bench offsets [--json] [--commits N] [--threads T]

Why: since issue 18's finding 1, `commit_offset` writes a record into the replica set's
CommitLog through the put path (needAckNums replicas hold it before the answer) instead of
rewriting consumerOffset.json on the master. Spark commits per micro-batch (one call per
queue), the gRPC proxy per state snapshot, so the figure that matters is the latency of one
commit and how many one client gets through per second.

Method: `rocketha-cluster up --insecure --replicas 3` (static roles: a SYNC_MASTER and two
slaves, inSyncReplicas=2, ASYNC_FLUSH; and a standalone broker, 1 replica) on 127.0.0.1; this
process commits N offsets (distinct queue offsets on one queue) through `connector.Admin`, from
1 thread and then from T threads at once, and reports commits/s and the latency p50/p99. Run it
with PYTHONPATH pointing at an older checkout for the figure before a change (the brokers are
started with the same PYTHONPATH). On this 2-core machine client and brokers share the cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig

COMMON = {"mappedFileSizeCommitLog": str(64 << 20), "maxMessageSize": str(4 << 20),
          "defaultTopicQueueNums": "1"}


def cluster(directory: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "ha.cluster", *args, "--dir", str(directory)],
                   check=True, capture_output=True, timeout=300)


def up(directory: Path, replicas: int, settings: dict[str, str]) -> str:
    args = ["up", "--insecure", "--replicas", str(replicas)]
    for key, value in {**COMMON, **settings}.items():
        args += ["--set", f"{key}={value}"]
    cluster(directory, *args)
    master = json.loads((directory / "cluster.json").read_text())["brokers"][0]
    endpoint = f"{master.get('host', '127.0.0.1')}:{master['port']}"
    admin = Admin(ClientConfig(brokers=(endpoint,), retries_max=20))
    deadline = time.monotonic() + 60
    while len(admin.action("broker_info").get("sync_state_set", [0])) < replicas:
        assert time.monotonic() < deadline, "the slaves did not join the SyncStateSet"
        time.sleep(0.05)
    return endpoint


def commit_run(endpoint: str, commits: int, threads: int) -> dict[str, Any]:
    admin = Admin(ClientConfig(brokers=(endpoint,), retries_max=3))
    admin.create_topic("bench", queues=threads)
    per_thread = commits // threads

    def one_thread(queue_id: int) -> list[float]:
        latencies = []
        for queue_offset in range(per_thread):
            started = time.perf_counter()
            admin.commit_offset("bench-group", "bench", queue_id, queue_offset + 1)
            latencies.append(time.perf_counter() - started)
        return latencies

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        latencies = sorted(x for part in pool.map(one_thread, range(threads)) for x in part)
    elapsed = time.perf_counter() - started
    assert admin.query_offsets("bench-group", "bench") == {
        q: per_thread for q in range(threads)}, "a commit was lost"
    return {"commits_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for name, replicas, settings in (
            ("standalone", 1, {}),
            ("3 replicas", 3, {})):
        directory = Path(tempfile.mkdtemp(prefix="bench-offsets-"))
        try:
            endpoint = up(directory, replicas, settings)
            figures[name] = {"1 thread": commit_run(endpoint, args.commits, 1),
                             f"{args.threads} threads": commit_run(endpoint, args.commits,
                                                                   args.threads)}
        finally:
            cluster(directory, "down")
            shutil.rmtree(directory, ignore_errors=True)
        if not args.json:
            print(f"{name}: {figures[name]}", flush=True)
    print(json.dumps({"bench": "offsets", "commits": args.commits, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

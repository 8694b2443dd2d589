"""Topic-change benchmark: what a create and a first put into a new topic cost now that a
topic change is a quorum write.

    python3 build.py bench topics [--json] [--topics N]

Why: since issue 18's finding 3, `create_topic` (and the auto-create of a first put into an
unknown topic) writes a record into the replica set's CommitLog through the put path and waits
for PUT_OK, instead of rewriting topics.json on the master. Only the first put into a topic
pays it: the figure that matters is that first put beside the second one.

Method: `rocketha-cluster up --insecure` (a standalone broker, then 3 replicas with static
roles: a SYNC_MASTER and two slaves, inSyncReplicas=2, ASYNC_FLUSH) on 127.0.0.1; this process
times N `create_topic` calls through `connector.Admin`, then for N new topic names one
`Producer.send` (the first, auto-creating) and a second `send` into the same topic; p50/p99 of
each. Run it with PYTHONPATH pointing at an older checkout for the figure before a change (the
brokers are started with the same PYTHONPATH). On this 2-core machine client and brokers share
the cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Producer
from tests.bench.bench_offsets import cluster, up


def _percentiles(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)
    return {"p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2)}


def topic_run(endpoint: str, topics: int) -> dict[str, Any]:
    config = ClientConfig(brokers=(endpoint,), retries_max=3)
    admin = Admin(config)
    creates = []
    for index in range(topics):
        started = time.perf_counter()
        admin.create_topic(f"created-{index}", queues=2)
        creates.append(time.perf_counter() - started)
    first, second = [], []
    with Producer(config) as producer:
        producer.send("warm-up", b"x", queue_id=0)  # the connection, not the topic
        for index in range(topics):
            for latencies in (first, second):
                started = time.perf_counter()
                assert producer.send(f"auto-{index}", b"x", queue_id=0).status == "PUT_OK"
                latencies.append(time.perf_counter() - started)
    assert len(admin.list_topics()) == 2 * topics + 1, "a topic is missing"
    return {"create_topic": _percentiles(creates), "first put (auto-create)":
            _percentiles(first), "second put": _percentiles(second)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--topics", type=int, default=100)
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for name, replicas in (("standalone", 1), ("3 replicas", 3)):
        directory = Path(tempfile.mkdtemp(prefix="bench-topics-"))
        try:
            figures[name] = topic_run(up(directory, replicas, {}), args.topics)
        finally:
            cluster(directory, "down")
            shutil.rmtree(directory, ignore_errors=True)
        if not args.json:
            print(f"{name}: {figures[name]}", flush=True)
    print(json.dumps({"bench": "topics", "topics": args.topics, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

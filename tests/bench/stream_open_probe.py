"""Probe: what opening a produce stream adds to a send (a producer's first send to a topic).

Method: one broker (SYNC_MASTER, ASYNC_FLUSH, a replica set of 1), `--topics` topics of 8
queues, every queue written once by another producer; then one Producer sends, for each of
`--pairs` topics in random order, to queue 1 (its first send to the topic: it opens the
topic's DoPut stream) and then to queue 2 (the stream is open: a producer's lanes share it).
Both kinds alternate, so they share the same moments of a shared machine.

    PYTHONPATH=. .venv/bin/python tests/bench/stream_open_probe.py --topics 1250 --pairs 1000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from connector import Admin, ClientConfig, Producer
from tests.bench.scale_probe import load_average, percentile
from tests.integration.broker_process import BrokerProcess

QUEUES_PER_TOPIC = 8
WARMUP = 50
BODY = b"x" * 100


def _summary(name: str, latencies_s: list[float]) -> str:
    ms = [value * 1000 for value in latencies_s]
    return (f"{name:>28}: p50 {percentile(ms, 0.5):6.3f}  p90 {percentile(ms, 0.9):6.3f}  "
            f"p99 {percentile(ms, 0.99):6.3f}  max {max(ms):7.3f} ms  (n={len(ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1250)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    broker = BrokerProcess(Path(tempfile.mkdtemp()) / "broker", brokerRole="SYNC_MASTER",
                           flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=str(64 << 20),
                           queuesMax=str((args.topics + 1) * QUEUES_PER_TOPIC))  # (scale_queues)
    broker.start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,))
        admin = Admin(config)
        for topic in range(args.topics):
            admin.create_topic(f"q{topic}", queues=QUEUES_PER_TOPIC)
        with Producer(config) as writer:
            for topic in range(args.topics):
                rows = [{"body": BODY, "queue_id": queue} for queue in range(QUEUES_PER_TOPIC)]
                assert all(result.ok for result in writer.send_batch(f"q{topic}", rows))
        opening: list[float] = []
        open_already: list[float] = []
        order = list(range(1, args.topics))
        random.Random(args.seed).shuffle(order)
        with Producer(config) as producer:
            for _ in range(WARMUP):
                assert producer.send("q0", BODY, queue_id=0).ok
            for topic in order[:args.pairs]:
                for queue, latencies in ((1, opening), (2, open_already)):
                    started = time.perf_counter()
                    assert producer.send(f"q{topic}", BODY, queue_id=queue).ok
                    latencies.append(time.perf_counter() - started)
        print(_summary("first send (opens a stream)", opening))
        print(_summary("second send (stream open)", open_already))
        print(f"load {load_average()}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()

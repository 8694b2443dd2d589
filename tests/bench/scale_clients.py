"""Scale curves (b): producers (connections) and consumer groups per broker.

Method: one standalone broker (ASYNC_FLUSH). Producers: N `connector.Producer` objects in this
process, each its own gRPC connection with its DoPut stream open (each sends one message
first); then PUT_SAMPLES single 100 B sends, one in flight, taking the producers in turn, so
the offered load is the same at every N and only the number of open streams grows: put
p50/p99, and the broker's threads and RSS with N streams open (threads per stream = the slope).
Consumer groups: G groups each commit an offset (`Admin.commit_offset`, a quorum write of the
offset log) on one queue; then COMMIT_SAMPLES commits taking the groups in turn: commits/s, and
the broker's RSS with G groups' offsets held (bytes per group = the slope).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from connector import Admin, ClientConfig, Producer
from tests.bench.scale_probe import load_average, percentile, rss_bytes, threads
from tests.integration.broker_process import BrokerProcess

BODY = b"x" * 100
COMMIT_SAMPLES = 300


def _broker(directory: Path, **overrides: str) -> BrokerProcess:
    return BrokerProcess(directory, flushDiskType="ASYNC_FLUSH",
                         mappedFileSizeCommitLog=str(64 << 20), **overrides).start()


def producers_curve(work: Path, sizes: list[int], samples: int) -> list[dict[str, Any]]:
    broker = _broker(work / "producers")
    rows = []
    producers: list[Producer] = []
    try:
        config = ClientConfig(brokers=(broker.endpoint,))
        Admin(config).create_topic("p", queues=4)
        assert broker.process is not None
        for size in sizes:
            while len(producers) < size:
                producer = Producer(config)
                assert producer.send("p", BODY, queue_id=0).ok  # its stream is open
                producers.append(producer)
            latencies = []
            for index in range(samples):
                start = time.perf_counter()
                assert producers[index % size].send("p", BODY, queue_id=index % 4).ok
                latencies.append(time.perf_counter() - start)
            row = {"producers": size, "load_1m": load_average(),
                   "put_p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
                   "put_p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
                   "broker_threads": threads(broker.process.pid),
                   "broker_rss_bytes": rss_bytes(broker.process.pid)}
            print(f"producers {size:5d}: put p50 {row['put_p50_ms']:.2f} ms p99 "
                  f"{row['put_p99_ms']:.2f} ms, broker threads {row['broker_threads']}, RSS "
                  f"{row['broker_rss_bytes'] / 2**20:.0f} MiB (load {row['load_1m']})",
                  flush=True)
            rows.append(row)
    finally:
        for producer in producers:
            producer.close()
        broker.stop()
    return rows


def groups_curve(work: Path, sizes: list[int]) -> list[dict[str, Any]]:
    broker = _broker(work / "groups")
    rows = []
    try:
        admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
        admin.create_topic("g", queues=1)
        assert broker.process is not None
        groups = 0
        offset = 0
        for size in sizes:
            while groups < size:
                offset += 1
                admin.commit_offset(f"group-{groups}", "g", 0, offset)
                groups += 1
            start = time.perf_counter()
            for index in range(COMMIT_SAMPLES):
                offset += 1
                admin.commit_offset(f"group-{index % size}", "g", 0, offset)
            rate = COMMIT_SAMPLES / (time.perf_counter() - start)
            row = {"groups": size, "load_1m": load_average(),
                   "commits_per_s": round(rate, 1),
                   "broker_threads": threads(broker.process.pid),
                   "broker_rss_bytes": rss_bytes(broker.process.pid)}
            print(f"groups {size:5d}: {rate:,.0f} offset commits/s, broker RSS "
                  f"{row['broker_rss_bytes'] / 2**20:.0f} MiB (load {row['load_1m']})",
                  flush=True)
            rows.append(row)
    finally:
        broker.stop()
    return rows

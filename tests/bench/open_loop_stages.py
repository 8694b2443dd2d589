"""Where an open-loop `send_async` message's time goes, stage by stage, on a rocketha set of 3.

    python3 tests/bench/open_loop_stages.py [--json] [--seconds S] [--rates R,R,...]

The same set as `bench peers --open-loop` (tests/bench/bench_peers.py RocketHACluster: 3 brokers,
ASYNC_FLUSH, inSyncReplicas 2), the same client (`Producer.send_async`, ProducerConfig(linger_ms=0),
100 B, a callback per message) and schedule (tests/bench/open_loop.py: message i due at i / rate).
Each message gets five timestamps: due, `send_async` called, its batch's round trip started on a
sender thread, that round trip ended (reply read), its callback called. The stages between them:

    late      due -> send_async       the sending loop behind its schedule (CPU, the GIL)
    queued    send_async -> on wire   the hand-off to a sender thread, or the wait for the
                                      lane's batch in flight (one per lane: producer_core.py)
    round     round trip              encode, DoPut write, the broker's put, its reply
    settled   reply -> callback       the batch's futures settled, earlier callbacks run

p50 / p90 / p99 of each, the mean batch size, and the client process's CPU per message. The
round trip is timed around `Producer._run_batch` (a private hook: this is a probe, not an API).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Producer, ProducerConfig
from connector.client.producer_core import Batch
from connector.protocol import PutReply, RocketHAError
from tests.bench.bench_peers import RocketHACluster
from tests.bench.open_loop import Schedule

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("late", "queued", "round", "settled", "total")


def _percentile_ms(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1e3, 3)


def stages(producer: Producer, topic: str, rate_per_s: float, seconds: float
           ) -> dict[str, Any]:
    """One open-loop run on `producer`; its stage percentiles."""
    run_batch = producer._run_batch
    batch_sizes: list[int] = []
    wire: dict[int, tuple[float, float]] = {}  # id(future) -> (round trip start, end)

    def timed(batch: Batch) -> PutReply | RocketHAError:
        started = time.perf_counter()
        outcome = run_batch(batch)
        ended = time.perf_counter()
        batch_sizes.append(len(batch.messages))
        for message in batch.messages:
            wire[id(message)] = (started, ended)
        return outcome

    producer.send(topic, b"warm")  # the sender exists from here on
    assert producer._sender is not None
    producer._sender._run_batch = timed
    rows: list[tuple[float, float, int, float]] = []
    lock = threading.Lock()

    def acked(due: float, sent: float, future: Future[Any]) -> None:
        called = time.perf_counter()
        assert future.result().ok
        with lock:
            rows.append((due, sent, id(future), called))

    body = b"x" * 100
    schedule = Schedule(rate_per_s, seconds)
    futures = []  # kept: their ids stay unique until the end
    cpu_start_s = time.process_time()
    start = time.perf_counter()
    while not schedule.done:
        for index in schedule.take_due(time.perf_counter() - start):
            sent = time.perf_counter()
            future = producer.send_async(topic, body)
            future.add_done_callback(functools.partial(acked, start + schedule.due_s(index),
                                                       sent))
            futures.append(future)
        time.sleep(schedule.wait_s(time.perf_counter() - start))
    producer.flush()
    cpu_s = time.process_time() - cpu_start_s
    producer._sender._run_batch = run_batch
    with lock:
        assert len(rows) == schedule.count
        spans: dict[str, list[float]] = {stage: [] for stage in STAGES}
        for due, sent, key, called in rows:
            on_wire, replied = wire[key]
            for stage, value in zip(STAGES, (sent - due, on_wire - sent, replied - on_wire,
                                             called - replied, called - due), strict=True):
                spans[stage].append(value)
    return {"rate_per_s": round(rate_per_s), "messages": len(rows),
            "mean_batch": round(sum(batch_sizes) / len(batch_sizes), 2),
            "client_cpu_us_per_message": round(cpu_s / len(rows) * 1e6, 1),
            "load_1m": round(os.getloadavg()[0], 2),
            **{stage: {f"p{round(q * 100)}_ms": _percentile_ms(values, q)
                       for q in (0.5, 0.9, 0.99)} for stage, values in spans.items()}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0, help="per rate")
    parser.add_argument("--rates", default="1000,2500,5000", help="messages/s, comma separated")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(dir=ROOT / ".bench-tmp" if (ROOT / ".bench-tmp").is_dir()
                                 else None))
    cluster = RocketHACluster(work / "rh", 3, "ASYNC_FLUSH")
    results = []
    try:
        cluster.start()
        config = cluster.config()
        cluster.admin().create_topic("stages", queues=4)
        for rate in (float(rate) for rate in args.rates.split(",")):
            with Producer(config, batching=ProducerConfig(linger_ms=0)) as producer:
                result = stages(producer, "stages", rate, args.seconds)
            results.append(result)
            print(f"{result['rate_per_s']:,}/s: batch {result['mean_batch']}, client CPU "
                  f"{result['client_cpu_us_per_message']} us/msg, load {result['load_1m']}",
                  flush=True)
            for stage in STAGES:
                figures = result[stage]
                print(f"  {stage:8s} p50 {figures['p50_ms']:8.3f}  p90 {figures['p90_ms']:8.3f}  "
                      f"p99 {figures['p99_ms']:8.3f} ms", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"rates": results}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

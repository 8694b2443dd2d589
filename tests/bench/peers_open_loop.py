"""Tail latency under open-loop load: rocketha and NATS JetStream, 3 replicas, in one run.

    python3 build.py bench peers --open-loop [--json] [--seconds S]
    python3 build.py bench peers_open_loop [--json] [--seconds S]     (the same)

Method: a 3-node JetStream cluster (R3 stream, file storage, default durability) and a rocketha
set of 3 (`rocketha-cluster up --replicas 3 --controllers 1`, ASYNC_FLUSH, inSyncReplicas 2),
both up at once on 127.0.0.1 (tests/bench/bench_peers.py starts them). For each body size (100 B,
1 KiB): each system's maximum acked rate of single-message publishes (closed loop, S seconds:
JetStream's nats-py publish_async with two windows pending, our Producer.send_async), then
constant-rate runs at FRACTIONS of JetStream's maximum (the same absolute rate for both, the two
systems taking turns), S seconds each. Message i is due at i / rate from the start and its
latency runs from that due time to its acknowledgement (tests/bench/open_loop.py: no
coordinated omission, a sender that falls behind charges the delay to each message it made
late), into HdrHistogram-style buckets (3 % precision); p50/p99/p99.9 and max. rocketha sends
with `Producer.send_async` and ProducerConfig(linger_ms=0) (a message leaves as soon as a lane
is free; the default linger of 5 ms would add up to 5 ms to every latency); JetStream with
nats-py's `publish_async` (up to MAX_PENDING acks pending). With --json the last line has
`open_loop_p99_ratio_50pct` (ours / JetStream's p99, 100 B, at 50 % of JetStream's maximum)
and the same per size and fraction. One Python process drives each side: on a 2-core machine the
client's CPU is part of every figure, for both systems.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
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
from connector import ClientConfig, Producer, ProducerConfig
from tests.bench.bench_peers import (
    SIZES,
    NatsCluster,
    RocketHACluster,
    _nats_connect,
    ensure_peer_tools,
    machine,
    nats_publish,
    nats_ready,
    nats_stream,
    rh_send_async,
)
from tests.bench.open_loop import LatencyHistogram, Schedule

ROOT = Path(__file__).resolve().parents[2]
FRACTIONS = (0.25, 0.5, 0.8)
MAX_PENDING = 20_000  # nats-py publish_async: acks pending at once
ACK_TIMEOUT_S = 60.0


def rh_open_loop(config: ClientConfig, topic: str, size: int, rate_per_s: float,
                 seconds: float) -> LatencyHistogram:
    histogram = LatencyHistogram()
    lock = threading.Lock()
    failed: list[str] = []

    def acked(due: float, future: Future[Any]) -> None:
        now = time.perf_counter()
        error = future.exception()
        with lock:
            if error is not None or not future.result().ok:
                failed.append(repr(error or future.result()))
            histogram.record((now - due) * 1e6)

    body = b"x" * size
    schedule = Schedule(rate_per_s, seconds)
    with Producer(config, batching=ProducerConfig(linger_ms=0)) as producer:
        producer.send(topic, b"warm")
        start = time.perf_counter()
        while not schedule.done:
            for index in schedule.take_due(time.perf_counter() - start):
                future = producer.send_async(topic, body)
                future.add_done_callback(functools.partial(acked, start + schedule.due_s(index)))
            time.sleep(schedule.wait_s(time.perf_counter() - start))
        producer.flush()
    assert not failed, failed[:3]
    assert histogram.total == schedule.count
    return histogram


async def nats_open_loop(servers: list[str], subject: str, size: int, rate_per_s: float,
                         seconds: float) -> LatencyHistogram:
    histogram = LatencyHistogram()
    body = b"x" * size
    schedule = Schedule(rate_per_s, seconds)
    nc = await _nats_connect(servers)
    try:
        js = nc.jetstream(publish_async_max_pending=MAX_PENDING)
        await js.publish(subject, b"warm")

        def acked(due: float, future: asyncio.Future[Any]) -> None:
            histogram.record((time.perf_counter() - due) * 1e6)

        pending = []
        start = time.perf_counter()
        while not schedule.done:
            for index in schedule.take_due(time.perf_counter() - start):
                future = await js.publish_async(subject, body)
                future.add_done_callback(functools.partial(acked, start + schedule.due_s(index)))
                pending.append(future)
            await asyncio.sleep(schedule.wait_s(time.perf_counter() - start))
        acks = await asyncio.wait_for(asyncio.gather(*pending), timeout=ACK_TIMEOUT_S)
        assert all(ack.seq > 0 for ack in acks)
    finally:
        await nc.close()
    assert histogram.total == schedule.count
    return histogram


def _case(name: str, histogram: LatencyHistogram) -> dict[str, Any]:
    summary = histogram.summary_ms()
    print(f"    {name:9s} p50 {summary['p50_ms']:8.2f} ms  p99 {summary['p99_ms']:8.2f} ms  "
          f"p99.9 {summary['p999_ms']:8.2f} ms  max {summary['max_ms']:8.2f} ms", flush=True)
    return {**summary, "buckets_us": histogram.buckets()}


def open_loop_cases(binary: str, work: Path, seconds: float) -> dict[str, Any]:
    nats = NatsCluster(binary, work / "nats-open-loop", sync_always=False)
    rocketha = RocketHACluster(work / "rh-open-loop", 3, "ASYNC_FLUSH")
    result: dict[str, Any] = {}
    try:
        nats.start()
        asyncio.run(nats_ready(nats.servers))
        asyncio.run(nats_stream(nats.servers, "OL", 3))
        rocketha.start()
        config = rocketha.config()
        for label, size in SIZES.items():
            topic = f"ol_{label}"
            rocketha.admin().create_topic(topic, queues=4)
            theirs_max = asyncio.run(nats_publish(nats.servers, "OL", size, seconds))
            ours_max = rh_send_async(config, topic, seconds, size)
            print(f"{label}: maximum acked single-message rate: JetStream {theirs_max:,.0f}/s, "
                  f"rocketha {ours_max:,.0f}/s (load {os.getloadavg()[0]:.2f})", flush=True)
            cases: dict[str, Any] = {}
            for fraction in FRACTIONS:
                rate = fraction * theirs_max
                print(f"  {fraction:.0%} of JetStream's maximum: {rate:,.0f} msgs/s", flush=True)
                jetstream = _case("JetStream", asyncio.run(
                    nats_open_loop(nats.servers, "OL", size, rate, seconds)))
                ours = _case("rocketha", rh_open_loop(config, topic, size, rate, seconds))
                cases[f"{round(fraction * 100)}pct"] = {
                    "rate_per_s": round(rate), "load_1m": round(os.getloadavg()[0], 2),
                    "jetstream": jetstream, "rocketha": ours,
                    "p99_ratio": round(ours["p99_ms"] / jetstream["p99_ms"], 3)}
            result[label] = {"jetstream_max_per_s": round(theirs_max),
                             "rocketha_max_per_s": round(ours_max), "cases": cases}
    finally:
        nats.stop()
        rocketha.stop()
    return result


def keys(result: dict[str, Any]) -> dict[str, float]:
    figures = {"open_loop_p99_ratio_50pct": result["100B"]["cases"]["50pct"]["p99_ratio"]}
    for label, sized in result.items():
        for case, figure in sized["cases"].items():
            figures[f"open_loop_p99_ratio_{case}_{label}"] = figure["p99_ratio"]
            figures[f"open_loop_rocketha_p99_ms_{case}_{label}"] = figure["rocketha"]["p99_ms"]
            figures[f"open_loop_jetstream_p99_ms_{case}_{label}"] = figure["jetstream"]["p99_ms"]
    return figures


def run(seconds: float, out: Path) -> dict[str, Any]:
    """The whole open-loop comparison; its JSON (with every bucket) is written under `out`."""
    binary = ensure_peer_tools()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out))
    load_start = round(os.getloadavg()[0], 2)
    try:
        cases = open_loop_cases(binary, work, seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": machine(), "seconds_per_case": seconds, "load_1m_start": load_start,
              "load_1m_end": round(os.getloadavg()[0], 2), "sizes": cases,
              "keys": keys(cases)}
    (out / "peers-open-loop.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"JSON: {out / 'peers-open-loop.json'}")
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0, help="per case")
    parser.add_argument("--out", type=Path, default=ROOT / ".bench-tmp" / "peers")
    args = parser.parse_args(argv)
    result = run(args.seconds, args.out)
    if args.json:
        print(json.dumps(result["keys"], sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""End-to-end benchmark: from `send` to the row being visible in a streaming query's memory
sink, and where the time goes.

    python3 build.py bench e2e [--json] [--seconds S] [--rates 1000,10000]

Method: one real broker (ASYNC_FLUSH) with a topic of QUEUES queues on 127.0.0.1, and a
local[2] SparkSession in this process running
`readStream.format("rocketha").option("startingOffsets", "latest")` into the memory sink with
Spark's default trigger (the next micro-batch starts as soon as the last one ended: the same
trigger as `processingTime="0 seconds"`). For each rate R, a separate process
(tests/bench/e2e_producer.py) sends R msgs/s for S seconds on an open-loop schedule, each
body the wall-clock time the message was due. A row is visible once its micro-batch has added
it to the sink: the batch's start (`timestamp` of its progress report) plus its
`triggerExecution` less its `commitOffsets` time; a row belongs to the first batch whose end
offset for its queue is past its queue offset. Latency = visible - due, p50/p99/max over
every row. Where the time goes, averaged over rows: waiting for the micro-batch that takes the
row to start (from due to the batch's start: the previous batch's run and the poll for new
offsets), then that batch's `latestOffset`, `walCommit`, `getBatch`, `queryPlanning` and
`addBatch` (task start, pulls from the broker, the sink's write). With --json the last line
has `e2e_p50_s_<rate>` and `e2e_p99_s_<rate>` (rate as 1k, 10k...); the whole result is
written to .bench-tmp/e2e.json. The issue's 30-minute soak
(`soak_rss_growth_ratio`) and the Delta sink are not measured yet.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Producer
from tests.bench.bench_peers import machine
from tests.bench.bench_spark import bench_environment
from tests.bench.scale_probe import load_average, percentile
from tests.integration.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 4
CATCH_UP_TIMEOUT_S = 300.0
PHASES = ("latestOffset", "walCommit", "getBatch", "queryPlanning", "addBatch")


def _progress(query: Any) -> list[dict[str, Any]]:
    return [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]


def _end_offsets(progress: dict[str, Any], topic: str) -> dict[str, int]:
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return (end or {}).get(topic, {})


def _wait_caught_up(query: Any, topic: str, targets: dict[str, int]) -> None:
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while True:
        last = query.lastProgress
        if last is not None:
            last = last if isinstance(last, dict) else json.loads(last.json)
            ends = _end_offsets(last, topic)
            if all(ends.get(key, 0) >= value for key, value in targets.items()):
                return
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "the query did not read every message in time"
        time.sleep(0.1)


def _batches(progress: list[dict[str, Any]], topic: str) -> dict[str, list[tuple[int, dict]]]:
    """queue key -> [(end offset, batch facts)] in batch order, batches with rows only."""
    by_queue: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for report in progress:
        if not report.get("numInputRows"):
            continue
        durations = report["durationMs"]
        start_s = datetime.datetime.fromisoformat(
            report["timestamp"]).timestamp()  # ISO 8601, "Z": UTC
        facts = {"start_s": start_s,
                 "visible_s": start_s + (durations.get("triggerExecution", 0)
                                         - durations.get("commitOffsets", 0)) / 1000,
                 **{phase: durations.get(phase, 0) / 1000 for phase in PHASES}}
        for key, end in _end_offsets(report, topic).items():
            by_queue.setdefault(key, []).append((end, facts))
    return by_queue


def rate_case(spark: SparkSession, broker: BrokerProcess, rate: int, seconds: float,
              work: Path) -> dict[str, Any]:
    topic = f"e2e_{rate}"
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic(topic, queues=QUEUES)
    with Producer(config) as producer:  # every queue exists in the source's first listing
        for queue_id in range(QUEUES):
            producer.send(topic, struct.pack(">d", 0.0), queue_id=queue_id)
    query = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
             .option("subscribe", topic).option("startingOffsets", "latest").load()
             .select("brokerName", "queueId", "queueOffset", "body")
             .writeStream.format("memory").queryName(topic)
             .option("checkpointLocation", str(work / f"checkpoint-{rate}")).start())
    try:
        # warm-up: a batch with rows has run (Python workers started, offsets known); its
        # rows carry due time 0 and are left out
        with Producer(config) as producer:
            while not any(p.get("numInputRows") for p in _progress(query)):
                assert query.exception() is None, query.exception()
                producer.send(topic, struct.pack(">d", 0.0))
                time.sleep(0.2)
        load = load_average()
        done = subprocess.run([sys.executable, str(ROOT / "tests/bench/e2e_producer.py"),
                               broker.endpoint, topic, str(rate), str(seconds)],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        sent = int(done.stdout.split()[-1])
        targets = {f"{q['queue_id']}": q["max_queue_offset"]
                   for q in Admin(config).queue_offsets(topic)}
        broker_name = broker.action("broker_info").get("broker_name", "broker-a")
        targets = {f"{broker_name}:{key}": value for key, value in targets.items()}
        _wait_caught_up(query, topic, targets)
        progress = _progress(query)
    finally:
        query.stop()
    rows = spark.table(topic).collect()
    batches = _batches(progress, topic)
    latencies, waits = [], []
    phases = dict.fromkeys(PHASES, 0.0)
    for row in rows:
        due_s = struct.unpack(">d", bytes(row.body))[0]
        if due_s == 0.0:
            continue  # sent before the load: the queues' first messages and the warm-up
        ends = batches[f"{row.brokerName}:{row.queueId}"]
        index = bisect.bisect_right([end for end, _ in ends], row.queueOffset)
        facts = ends[index][1]
        latencies.append(facts["visible_s"] - due_s)
        waits.append(facts["start_s"] - due_s)
        for phase in PHASES:
            phases[phase] += facts[phase]
    assert len(latencies) == sent, (len(latencies), sent)
    count = len(latencies)
    result = {"rate_per_s": rate, "rows": count, "load_1m": load,
              "batches": sum(1 for p in progress if p.get("numInputRows")),
              "p50_s": round(percentile(latencies, 0.5), 3),
              "p99_s": round(percentile(latencies, 0.99), 3),
              "max_s": round(max(latencies), 3),
              "where_s": {"wait_for_batch": round(sum(waits) / count, 3),
                          **{phase: round(total / count, 3)
                             for phase, total in phases.items()}}}
    print(f"{rate:,} msgs/s: p50 {result['p50_s']:.3f} s, p99 {result['p99_s']:.3f} s, max "
          f"{result['max_s']:.3f} s over {count:,} rows in {result['batches']} batches; "
          f"mean per row: {result['where_s']} (load {load})", flush=True)
    return result


def _label(rate: int) -> str:
    return f"{rate // 1000}k" if rate >= 1000 and rate % 1000 == 0 else str(rate)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=20.0, help="of load per rate")
    parser.add_argument("--rates", default="1000,10000")
    args = parser.parse_args(argv)
    rates = [int(rate) for rate in args.rates.split(",") if rate]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    work = bench_environment()
    broker = BrokerProcess(work / "broker", flushDiskType="ASYNC_FLUSH",
                           mappedFileSizeCommitLog=str(256 << 20)).start()
    spark = (SparkSession.builder.master("local[2]").appName("bench-e2e")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, float] = {}
    cases = []
    try:
        for rate in rates:
            case = rate_case(spark, broker, rate, args.seconds, work)
            cases.append(case)
            figures[f"e2e_p50_s_{_label(rate)}"] = case["p50_s"]
            figures[f"e2e_p99_s_{_label(rate)}"] = case["p99_s"]
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {"date": started, "machine": machine(), "seconds_per_rate": args.seconds,
              "cases": cases, "keys": figures}
    (work.parent / "e2e.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

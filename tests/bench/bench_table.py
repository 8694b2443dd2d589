"""Topic tables benchmark: reading the table vs plain Parquet, read_topic, lag, produce cost.

    python3 build.py bench table [--json] [--rows N] [--repeat R] [--interval-ms MS]

Method: two real broker processes on 127.0.0.1 (ASYNC_FLUSH, 1 GiB segments, a file:// tier
each): `off` (topicTableDefault=none) and `on` (topicTableDefault=delta, topicTableIntervalMs
= --interval-ms, 1000 by default), and a local[2] SparkSession in this process. 100 B bodies,
8 queues, produce batches of 8192 rows from one client.

  produce_ratio_table_on    acked produce rows/s into `on` / into `off`: R rounds of N/4 rows
                            each, the two brokers taking turns; best round each
  produce_cpu_ratio_table_on   the same rounds by CPU, which the machine's load does not
                            skew: the `off` broker's CPU seconds per row / the `on` broker's
                            (after its table caught up with those rows); table_cpu_us_per_row
                            is the `topic-tables` thread's share (/proc/<pid>/task/*/stat)
  table_lag_after_produce_s   `on`'s lag_seconds right after those rounds (the table lags
                            while produce fills the cores: topicTableNice yields them to puts)
  table_catch_up_s          and the seconds from then until the table holds every row
  table_lag_p99_s           `on`, a paced produce (--rate rows/s for --lag-seconds s), its
                            `broker info` lag_seconds sampled every 100 ms: the 99th percentile
  table_read_vs_parquet_ratio   the N rows of `on`'s topic once the table caught up and was
                            compacted (its upkeep, run in this process), read with Spark's
                            Parquet reader from the snapshot's files, against the same rows
                            written by Spark as plain Parquet (same session): two queries,
                            groupBy(queueId).agg(count, sum(length(body))) and a two-column
                            filter (queueId = 3 AND queueOffset >= N/16) with the same
                            aggregation; parquet time / table time, summed over both queries,
                            best of R each, the two sources taking turns
  read_topic_vs_parquet_ratio   materialization turned off for the topic, N/19 more rows
                            produced (5 % of the total in the tail), read_topic's rows against
                            the same rows as plain Parquet, the same two queries and turns
  read_topic_call_s         the seconds read_topic took to return that DataFrame: the table's
                            snapshot, the queues' bounds, the tail's copy and its check
  read_topic_cached_tail_vs_parquet_ratio   the same with read_topic(cache_tail=True): the
                            tail read once through the connector, later queries from Spark's
                            cache

The machine is shared: run it when it is quiet, and read the ratios (both sides in the same
turns) rather than the absolute rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Producer
from connector.spark.read_topic import read_topic
from ha.broker.table_maintenance import MaintenanceSettings, run_maintenance
from tests.integration.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 8
BODY_BYTES = 100
PRODUCE_BATCH_ROWS = 8192
TOPIC = "bench_table"
LAG_SAMPLE_S = 0.1
CATCH_UP_S = 300.0


def produce(broker: BrokerProcess, topic: str, rows: int, *, first: int = 0,
            rate: float | None = None) -> float:
    """Produce `rows` messages (batches round-robin over the queues); rows/s acked. With
    `rate`, paced to about that many rows/s."""
    config = ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=30_000)
    body = b"x" * (BODY_BYTES - 8)
    batch_rows = PRODUCE_BATCH_ROWS if rate is None else max(1, int(rate * LAG_SAMPLE_S))
    start = time.perf_counter()
    with Producer(config) as producer:
        for index, offset in enumerate(range(first, first + rows, batch_rows)):
            count = min(batch_rows, first + rows - offset)
            batch = pa.record_batch({
                "body": pa.array([body + b"%08d" % (offset + i) for i in range(count)],
                                 pa.binary()),
                "queue_id": pa.array([index % QUEUES] * count, pa.int32())})
            reply = producer.put(topic, batch)
            assert reply.status == "PUT_OK", reply
            if rate is not None:
                ahead_s = (offset + count - first) / rate - (time.perf_counter() - start)
                if ahead_s > 0:
                    time.sleep(ahead_s)  # pacing the load, not waiting for a condition
    return rows / (time.perf_counter() - start)


def cpu_s(pid: int, thread: str | None = None) -> float:
    """CPU seconds (user + system) of process `pid`, or of its threads named `thread` (the
    broker names its threads in the kernel: ha/broker/thread_names.py)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = ([Path(f"/proc/{pid}/stat")] if thread is None else
             [task / "stat" for task in Path(f"/proc/{pid}/task").iterdir()
              if (task / "comm").read_text().strip() == thread])
    total = 0
    for stat in stats:
        fields = stat.read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / tick


def table_stats(broker: BrokerProcess, topic: str) -> dict:  # type: ignore[type-arg]
    info = Admin(ClientConfig(brokers=(broker.endpoint,))).broker_info()
    return info["topic_tables"]["topics"].get(topic, {})


def wait_caught_up(broker: BrokerProcess, topic: str) -> float:
    """Seconds until the table holds every confirmed message of `topic`."""
    start = time.monotonic()
    while time.monotonic() < start + CATCH_UP_S:
        if table_stats(broker, topic).get("lag_messages") == 0:
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"the table did not catch up: {table_stats(broker, topic)}")


def lag_p99(broker: BrokerProcess, rate: float, seconds: float) -> tuple[float, float]:
    """Paced produce into a fresh table topic; (p99, max) of the sampled lag_seconds."""
    topic = TOPIC + "_lag"
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(LAG_SAMPLE_S):
            lag = table_stats(broker, topic).get("lag_seconds")
            if lag is not None:
                samples.append(float(lag))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    produce(broker, topic, int(rate * seconds), rate=rate)
    done.set()
    sampler.join()
    assert samples, "no lag sample"
    return float(np.percentile(samples, 99)), max(samples)


def queries(frame: DataFrame, rows: int) -> list[Callable[[], object]]:
    aggregate = (F.count(F.lit(1)).alias("n"), F.sum(F.length("body")).alias("bytes"))
    return [lambda: frame.groupBy("queueId").agg(*aggregate).collect(),
            lambda: frame.where((F.col("queueId") == 3) & (F.col("queueOffset") >= rows // 16))
            .agg(*aggregate).collect()]


def ratio_in_turns(candidate: DataFrame, parquet: DataFrame, rows: int, repeat: int
                   ) -> tuple[float, float, float]:
    """(parquet s / candidate s, candidate s, parquet s): per query best of `repeat`, the two
    taking turns after one warm-up of each; seconds summed over the queries."""
    sides = {"candidate": queries(candidate, rows), "parquet": queries(parquet, rows)}
    check = {name: [run() for run in runs] for name, runs in sides.items()}  # warm-up
    assert sorted(map(str, check["candidate"][0])) == sorted(map(str, check["parquet"][0])), \
        "the two sides answer differently"
    best = {name: [float("inf")] * len(runs) for name, runs in sides.items()}
    for _ in range(repeat):
        for name, runs in sides.items():
            for index, run in enumerate(runs):
                start = time.perf_counter()
                run()
                best[name][index] = min(best[name][index], time.perf_counter() - start)
    candidate_s, parquet_s = sum(best["candidate"]), sum(best["parquet"])
    return parquet_s / candidate_s, candidate_s, parquet_s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=20_000.0, help="lag phase rows/s")
    parser.add_argument("--lag-seconds", type=float, default=15.0)
    args = parser.parse_args(argv)
    assert args.rows >= 16 * QUEUES and args.repeat >= 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    common = {"mappedFileSizeCommitLog": str(1 << 30), "flushDiskType": "ASYNC_FLUSH",
              "defaultTopicQueueNums": str(QUEUES)}
    off = BrokerProcess(work / "off", tieredStoreUrl=f"file://{work / 'tier-off'}",
                        **common).start()
    on = BrokerProcess(work / "on", tieredStoreUrl=f"file://{work / 'tier-on'}",
                       topicTableDefault="delta", topicTableIntervalMs=str(args.interval_ms),
                       **common).start()
    spark = None
    figures: dict[str, float] = {"rows": float(args.rows), "interval_ms": args.interval_ms}
    try:
        for broker in (off, on):
            Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(TOPIC, queues=QUEUES)
        round_rows = max(PRODUCE_BATCH_ROWS, args.rows // 4)
        rates: dict[str, list[float]] = {"off": [], "on": []}
        sent = {"off": 0, "on": 0}
        pids = {"off": off.process.pid, "on": on.process.pid}  # type: ignore[union-attr]
        cpu_before = {name: cpu_s(pid) for name, pid in pids.items()}
        table_cpu_before = cpu_s(pids["on"], "topic-tables")
        for _ in range(args.repeat):
            for name, broker in (("off", off), ("on", on)):
                rates[name].append(produce(broker, TOPIC, round_rows, first=sent[name]))
                sent[name] += round_rows
        figures["table_lag_after_produce_s"] = float(
            table_stats(on, TOPIC).get("lag_seconds") or 0.0)
        # the materializer's work for these rows is done
        figures["table_catch_up_s"] = wait_caught_up(on, TOPIC)
        print(f"table lag after the rounds: {figures['table_lag_after_produce_s']:.2f} s, "
              f"caught up {figures['table_catch_up_s']:.2f} s later", flush=True)
        cpu = {name: cpu_s(pid) - cpu_before[name] for name, pid in pids.items()}
        table_cpu = cpu_s(pids["on"], "topic-tables") - table_cpu_before
        figures["produce_cpu_us_per_row_off"] = cpu["off"] / sent["off"] * 1e6
        figures["produce_cpu_us_per_row_on"] = cpu["on"] / sent["on"] * 1e6
        figures["table_cpu_us_per_row"] = table_cpu / sent["on"] * 1e6
        figures["produce_cpu_ratio_table_on"] = \
            (cpu["off"] / sent["off"]) / (cpu["on"] / sent["on"])
        print(f"broker CPU per row: {figures['produce_cpu_us_per_row_off']:.2f} us off, "
              f"{figures['produce_cpu_us_per_row_on']:.2f} us on, of which the topic-tables "
              f"thread {figures['table_cpu_us_per_row']:.2f} us", flush=True)
        figures["produce_rows_per_s_off"] = max(rates["off"])
        figures["produce_rows_per_s_on"] = max(rates["on"])
        figures["produce_ratio_table_on"] = max(rates["on"]) / max(rates["off"])
        print(f"produce: {max(rates['off']):,.0f} rows/s off, {max(rates['on']):,.0f} on "
              f"(best of {args.repeat} rounds of {round_rows:,})", flush=True)
        p99, worst = lag_p99(on, args.rate, args.lag_seconds)
        figures["table_lag_p99_s"], figures["table_lag_max_s"] = p99, worst
        print(f"lag at {args.rate:,.0f} rows/s: p99 {p99:.2f} s, max {worst:.2f} s "
              f"(interval {args.interval_ms} ms)", flush=True)

        if sent["on"] < args.rows:
            produce(on, TOPIC, args.rows - sent["on"], first=sent["on"])
            sent["on"] = args.rows
        wait_caught_up(on, TOPIC)
        uri = str(work / "tier-on" / "tables" / TOPIC)
        figures["table_files_before_compaction"] = len(DeltaTable(uri).file_uris())
        Admin(ClientConfig(brokers=(on.endpoint,))).update_topic(TOPIC, table="none")
        compacted = run_maintenance(uri, None, MaintenanceSettings(128 << 20, 168, 0),
                                    int(time.time() * 1000))
        assert compacted is not None
        figures["table_files"] = len(DeltaTable(uri).file_uris())
        spark = (SparkSession.builder.master("local[2]").appName("bench-table")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        table = spark.read.parquet(*DeltaTable(uri).file_uris())
        plain = str(work / "plain")
        table.write.parquet(plain)
        ratio, table_s, parquet_s = ratio_in_turns(table, spark.read.parquet(plain),
                                                   sent["on"], args.repeat)
        figures["table_read_vs_parquet_ratio"] = ratio
        print(f"table vs Parquet ({sent['on']:,} rows, {figures['table_files']:.0f} files): "
              f"{table_s:.2f} s vs {parquet_s:.2f} s, ratio {ratio:.3f}", flush=True)

        tail_rows = sent["on"] // 19  # 5 % of the total
        produce(on, TOPIC, tail_rows, first=sent["on"])
        total = sent["on"] + tail_rows
        start = time.perf_counter()
        whole = read_topic(spark, TOPIC, table=uri, brokers=on.endpoint)
        figures["read_topic_call_s"] = time.perf_counter() - start
        plain_whole = str(work / "plain-whole")
        whole.write.parquet(plain_whole)
        assert spark.read.parquet(plain_whole).count() == total
        ratio, topic_s, parquet_s = ratio_in_turns(whole, spark.read.parquet(plain_whole),
                                                   total, args.repeat)
        figures["read_topic_vs_parquet_ratio"] = ratio
        figures["read_topic_tail_rows"] = tail_rows
        print(f"read_topic returned in {figures['read_topic_call_s']:.2f} s", flush=True)
        print(f"read_topic vs Parquet ({total:,} rows, {tail_rows:,} in the tail): "
              f"{topic_s:.2f} s vs {parquet_s:.2f} s, ratio {ratio:.3f}", flush=True)
        cached = read_topic(spark, TOPIC, table=uri, brokers=on.endpoint, cache_tail=True)
        ratio, topic_s, parquet_s = ratio_in_turns(cached, spark.read.parquet(plain_whole),
                                                   total, args.repeat)
        figures["read_topic_cached_tail_vs_parquet_ratio"] = ratio
        print(f"read_topic, tail cached, vs Parquet: {topic_s:.2f} s vs {parquet_s:.2f} s, "
              f"ratio {ratio:.3f}", flush=True)
    finally:
        if spark is not None:
            spark.stop()
        on.stop()
        off.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

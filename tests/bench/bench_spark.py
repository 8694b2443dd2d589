"""Spark connector benchmark: batch read into an aggregation vs Parquet; exactly-once sink.

    python3 build.py bench spark [--json] [--rows N | --full] [--repeat R]

Method: one real broker process (ASYNC_FLUSH, 1 GiB segments) on 127.0.0.1 and a local[2]
SparkSession in this process. N messages of 100 B bodies (default 1 M, --full 10 M) are produced
into a topic of 8 queues, and the same rows (queueId, queueOffset, body, ...) are written to a
local Parquet file. Read case: `groupBy(queueId).agg(sum(length(body)))` over
`spark.read.format("rocketha")` and over `spark.read.parquet(file)`, best of R runs each, in the
same run (count() alone is no measure: Parquet answers it from footers). Spark prunes no columns
of Python sources, so the full-schema read moves all 11 columns; the projected read declares
`.schema("queueId INT, body BINARY")`, and the source then builds and ships only those two and
pulls only `body` from the broker (which builds no other column). Sink case: a streaming query
(Trigger AvailableNow) from the Parquet directory into a fresh topic with exactlyOnce=true, then
the same with exactlyOnce=false, after one warm-up query; rows/s over the query's wall time
(start to termination, including Spark's per-query start-up). Ceiling case: the same aggregation
over `tests/bench/spark_ceiling.py`, a Python source that reads nothing and yields pre-built
batches (same row count, 8 partitions) in rocketha's 11 columns and in 2 columns: what any
Python data source can reach here, so the rocketha figure can be read against it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from connector import Admin, ClientConfig, Producer  # noqa: E402
from tests.bench.spark_ceiling import CeilingSource  # noqa: E402
from tests.integration.broker_process import BrokerProcess  # noqa: E402

QUEUES = 8
BODY_BYTES = 100
PRODUCE_BATCH_ROWS = 8192
ROWS_MAX = 20_000_000
PROJECTED_DDL = "queueId INT, body BINARY"  # the columns the aggregation uses


def load(broker: BrokerProcess, topic: str, rows: int, parquet_dir: Path) -> float:
    """Produce `rows` messages and write the same rows to Parquet; returns produce rows/s."""
    config = ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=30_000)
    Admin(config).create_topic(topic, queues=QUEUES)
    parquet_dir.mkdir(parents=True)
    body = b"x" * (BODY_BYTES - 8)
    next_offsets = [0] * QUEUES
    writer = None
    start = time.perf_counter()
    with Producer(config) as producer:
        for index, first in enumerate(range(0, rows, PRODUCE_BATCH_ROWS)):
            count = min(PRODUCE_BATCH_ROWS, rows - first)
            queue_id = index % QUEUES
            bodies = pa.array([body + b"%08d" % (first + i) for i in range(count)],
                              pa.binary())
            batch = pa.record_batch({"body": bodies,
                                     "queue_id": pa.array([queue_id] * count, pa.int32())})
            reply = producer.put(topic, batch)
            assert reply.status == "PUT_OK", reply
            table = pa.table({
                "topic": pa.array([topic] * count), "queueId": batch.column("queue_id"),
                "queueOffset": pa.array(range(next_offsets[queue_id],
                                              next_offsets[queue_id] + count), pa.int64()),
                "body": bodies})
            next_offsets[queue_id] += count
            if writer is None:
                writer = pq.ParquetWriter(str(parquet_dir / "part-0.parquet"), table.schema)
            writer.write_table(table)
    elapsed = time.perf_counter() - start
    assert writer is not None
    writer.close()
    return rows / elapsed


def best_seconds(run, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def best_seconds_by_case(runs: dict[str, Callable[[], None]], repeat: int
                         ) -> dict[str, float]:
    """Best time of each case, the cases run in turn `repeat` times (drift hits all alike)."""
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            best[name] = min(best[name], best_seconds(run, 1))
    return best


def agg(df, rows: int) -> None:  # type: ignore[no-untyped-def]
    result = df.groupBy("queueId").agg(F.sum(F.length("body")).alias("bytes")).collect()
    assert sum(r.bytes for r in result) == rows * BODY_BYTES, "aggregate mismatch"


def read_cases(spark, broker: BrokerProcess, parquet_dir: Path, rows: int,  # type: ignore
               repeat: int, figures: dict[str, float]) -> None:
    """The aggregation over rocketha (full schema, then projected) and over Parquet, taking
    turns within each repeat, so the ratios compare like with like on a drifting machine."""
    def rocketha(schema: str | None):  # type: ignore[no-untyped-def]
        reader = (spark.read.format("rocketha").option("brokers", broker.endpoint)
                  .option("subscribe", "bench_read"))
        return reader if schema is None else reader.schema(schema)  # schema() mutates

    best = best_seconds_by_case({
        "full": lambda: agg(rocketha(None).load(), rows),
        "projected": lambda: agg(rocketha(PROJECTED_DDL).load(), rows),
        "parquet": lambda: agg(spark.read.parquet(str(parquet_dir)), rows),
    }, repeat)
    read_s, projected_s, parquet_s = best["full"], best["projected"], best["parquet"]
    figures["read_agg_rows_per_s"] = rows / read_s
    figures["read_projected_agg_rows_per_s"] = rows / projected_s
    figures["parquet_agg_rows_per_s"] = rows / parquet_s
    figures["read_vs_parquet_ratio"] = parquet_s / read_s
    figures["read_projected_vs_parquet_ratio"] = parquet_s / projected_s
    print(f"read agg  rocketha, 11 columns: {rows / read_s:12,.0f} rows/s ({read_s:.2f} s, best "
          f"of {repeat})")
    print(f"read agg  rocketha, projected : {rows / projected_s:12,.0f} rows/s "
          f"({projected_s:.2f} s; .schema(\"{PROJECTED_DDL}\"))")
    print(f"read agg  parquet             : {rows / parquet_s:12,.0f} rows/s ({parquet_s:.2f} s)")
    print(f"rocketha / parquet = {parquet_s / read_s:.2f} (11 columns), "
          f"{parquet_s / projected_s:.2f} (projected) (target >= 0.5)")


def sink_case(spark, broker: BrokerProcess, parquet_dir: Path, rows: int,  # type: ignore
              work: Path, topic: str, exactly_once: bool) -> float:
    schema = spark.read.parquet(str(parquet_dir)).schema
    start = time.perf_counter()
    query = (spark.readStream.schema(schema).parquet(str(parquet_dir)).select("body")
             .writeStream.format("rocketha").option("brokers", broker.endpoint)
             .option("topic", topic).option("exactlyOnce", str(exactly_once).lower())
             .option("checkpointLocation", str(work / f"checkpoint-{topic}"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(3600) and query.exception() is None
    elapsed = time.perf_counter() - start
    stored = sum(q["max_queue_offset"] for q in Admin(ClientConfig(
        brokers=(broker.endpoint,))).queue_offsets(topic))
    # at-least-once may store a batch twice (a client retry after a lost reply); exactly-once
    # must not
    assert stored >= rows, f"sink {topic} stored {stored} of {rows}"
    assert stored == rows or not exactly_once, f"exactly-once sink {topic} stored {stored} " \
        f"of {rows}"
    if stored != rows:
        print(f"sink {topic} (at-least-once) stored {stored - rows:,} duplicate rows")
    return rows / elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--full", action="store_true", help="10 M rows (the issue's size)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = 10_000_000 if args.full else args.rows
    assert 0 < rows <= ROWS_MAX and args.repeat >= 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    broker = BrokerProcess(work / "broker", mappedFileSizeCommitLog=str(1 << 30),
                           maxMessageSize=str(4 << 20), defaultTopicQueueNums=str(QUEUES)
                           ).start()
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, float] = {"rows": float(rows)}
    try:
        parquet_dir = work / "parquet"
        figures["produce_rows_per_s"] = load(broker, "bench_read", rows, parquet_dir)
        print(f"loaded {rows:,} rows of {BODY_BYTES} B: "
              f"{figures['produce_rows_per_s']:,.0f} rows/s produced")
        read_cases(spark, broker, parquet_dir, rows, args.repeat, figures)
        spark.dataSource.register(CeilingSource)
        for narrow, key in (("0", "ceiling_agg_rows_per_s"),
                            ("1", "ceiling_narrow_agg_rows_per_s")):
            ceiling = (spark.read.format("rocketha_ceiling").option("rows", str(rows))
                       .option("narrow", narrow))
            figures[key] = rows / best_seconds(lambda c=ceiling: agg(c.load(), rows),
                                               args.repeat)
        print(f"no-IO Python source, same aggregation: {figures['ceiling_agg_rows_per_s']:,.0f} "
              f"rows/s with the 11 source columns, {figures['ceiling_narrow_agg_rows_per_s']:,.0f}"
              " with 2 (Spark 4.2 prunes no columns of Python sources)")
        # the first streaming query of a session also pays worker start-ups: warm up first
        sink_case(spark, broker, parquet_dir, rows, work, "bench_sink_warm", False)
        figures["sink_rows_per_s"] = sink_case(spark, broker, parquet_dir, rows, work,
                                               "bench_sink_eo", True)
        figures["sink_plain_rows_per_s"] = sink_case(spark, broker, parquet_dir, rows, work,
                                                     "bench_sink_plain", False)
        print(f"streaming sink (exactly-once, AvailableNow, incl. query start): "
              f"{figures['sink_rows_per_s']:,.0f} rows/s; without exactly-once (same run): "
              f"{figures['sink_plain_rows_per_s']:,.0f} rows/s")
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

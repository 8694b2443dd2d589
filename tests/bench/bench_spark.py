"""Spark connector benchmark: batch read into an aggregation vs Parquet; exactly-once sink.

    python3 build.py bench spark [--json] [--rows N | --full] [--repeat R] [--no-sink]

Method: one real broker process (ASYNC_FLUSH, 1 GiB segments) on 127.0.0.1 and a local[2]
SparkSession in this process. N messages of 100 B bodies (default 1 M, --full 10 M) are produced
into a topic of 8 queues, and the same rows (queueId, queueOffset, body, ...) are written to a
local Parquet file. Read case: `groupBy(queueId).agg(sum(length(body)))` over
`spark.read.format("rocketha")` and over `spark.read.parquet(file)`, best of R runs each (5), all
cases taking turns within each repeat after one warm-up round (count() alone is no measure:
Parquet answers it from footers). Spark prunes no columns of Python sources, so a read moves
every column of its schema: the default case reads the lean default schema (8 columns), the
`lean7` case the default as it was before brokerName joined it (`columns=` those 7), the
`all` case `columns=*` (11), the projected case declares `.schema("queueId INT, body BINARY")`,
and the source then builds and ships only those two and pulls only `body` from the broker.
The reads plan as the source does by default (queue ranges under minRowsPerPartition share a
task: 1 M rows in 8 queues is 2 tasks); the `*_per_queue` cases read with
minRowsPerPartition=0, one task per queue as before, the baseline in the same turns.
Each case's CPU time (JVM, Spark's Python workers, broker; from /proc, in its fastest run) is
printed per row: where the microseconds go. Pushdown case (same turns): a selective
`where(queueId = 3 AND queueOffset >= 1000)` read with spark.sql.python.filterPushdown.enabled
on and off. Sink case: a streaming query
(Trigger AvailableNow) from the Parquet directory into a fresh topic with exactlyOnce=true, then
the same with exactlyOnce=false, after one warm-up query; rows/s over the query's wall time
(start to termination, including Spark's per-query start-up). Ceiling cases (in the same
turns): the same aggregation over `tests/bench/spark_ceiling.py`, a Python source that reads
nothing and yields pre-built batches (same row count, 8 partitions) in rocketha's 11, default 7
and 2 columns: what any Python data source can reach here, so the rocketha figures can be read
against it; `ceiling_narrow_packed` is the 2-column one in as many tasks as the rocketha read.
`--no-sink` skips the sink cases; `--cases default,lean7` runs only those read cases (and Parquet,
the yardstick), in turns as above, and prints their rows/s and ratio.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Producer
from connector.spark.options import MIN_ROWS_PER_PARTITION_DEFAULT
from connector.spark.planning import pack_groups
from tests.bench.spark_ceiling import CeilingSource
from tests.integration.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]

QUEUES = 8
BODY_BYTES = 100
PRODUCE_BATCH_ROWS = 8192
ROWS_MAX = 20_000_000
PROJECTED_DDL = "queueId INT, body BINARY"  # the columns the aggregation uses
SELECTIVE = "queueId = 3 AND queueOffset >= 1000"  # a few % of the rows: what pushdown skips
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
# the default schema before brokerName joined it (connector/spark/columns.py: record identity)
LEAN7 = "topic,queueId,queueOffset,key,tags,body,storeTimestamp"


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


def _proc_cpu_s(pid: int, *, reaped_children: bool) -> float:
    """utime + stime of one process from /proc (with its reaped children's when asked)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(n) for n in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class CpuMeter:
    """CPU seconds of the JVM (its own threads), Spark's Python workers (the daemon under the
    JVM, its workers and the workers it reaped) and the broker: where a read's time goes."""

    def __init__(self, jvm_pid: int, broker_pid: int) -> None:
        self.jvm_pid, self.broker_pid = jvm_pid, broker_pid

    def sample(self) -> dict[str, float]:
        python = 0.0
        pending = _children(self.jvm_pid)
        while pending:
            pid = pending.pop()
            python += _proc_cpu_s(pid, reaped_children=True)
            pending += _children(pid)
        return {"jvm": _proc_cpu_s(self.jvm_pid, reaped_children=False), "python": python,
                "broker": _proc_cpu_s(self.broker_pid, reaped_children=False)}


def best_seconds_by_case(runs: dict[str, Callable[[], None]], repeat: int,
                         meter: CpuMeter | None = None
                         ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Best time of each case, the cases run in turn `repeat` times (drift hits all alike),
    and each case's CPU seconds per component in its fastest run."""
    best = {name: float("inf") for name in runs}
    cpu: dict[str, dict[str, float]] = {}
    for run in runs.values():  # warm-up: JIT, worker start-up, page cache
        run()
    for _ in range(repeat):
        for name, run in runs.items():
            before = meter.sample() if meter is not None else {}
            elapsed = best_seconds(run, 1)
            if elapsed < best[name]:
                best[name] = elapsed
                if meter is not None:
                    after = meter.sample()
                    cpu[name] = {part: after[part] - before[part] for part in after}
    return best, cpu


def agg(df, rows: int) -> None:  # type: ignore[no-untyped-def]
    result = df.groupBy("queueId").agg(F.sum(F.length("body")).alias("bytes")).collect()
    assert sum(r.bytes for r in result) == rows * BODY_BYTES, "aggregate mismatch"


READ_CASES = {  # case -> (what it reads, JSON key of rows/s, JSON key of the Parquet ratio)
    "default": ("lean default schema, 8 columns", "read_agg_rows_per_s",
                "read_vs_parquet_ratio"),
    "lean7": ("the default without brokerName, 7 columns", "read_lean7_agg_rows_per_s",
              "read_lean7_vs_parquet_ratio"),
    "projected": (f'.schema("{PROJECTED_DDL}")', "read_projected_agg_rows_per_s",
                  "read_projected_vs_parquet_ratio"),
    "all": ("columns=*, all 11 columns", "read_all_columns_agg_rows_per_s",
            "read_all_columns_vs_parquet_ratio"),
    # one task per queue, as before minRowsPerPartition packed small ranges (the baseline)
    "default_per_queue": ("default schema, minRowsPerPartition=0", "read_per_queue_agg_rows_per_s",
                          "read_per_queue_vs_parquet_ratio"),
    "projected_per_queue": ("projected, minRowsPerPartition=0",
                            "read_projected_per_queue_agg_rows_per_s",
                            "read_projected_per_queue_vs_parquet_ratio"),
}


def read_cases(spark, broker: BrokerProcess, parquet_dir: Path, rows: int,  # type: ignore
               repeat: int, figures: dict[str, float], meter: CpuMeter | None,
               only: tuple[str, ...] = ()) -> None:
    """The aggregation over rocketha (default schema, projected, all columns) and over
    Parquet, taking turns within each repeat, so the ratios compare like with like on a
    drifting machine."""
    def rocketha(schema: str | None, **options: str):  # type: ignore[no-untyped-def]
        reader = (spark.read.format("rocketha").option("brokers", broker.endpoint)
                  .option("subscribe", "bench_read").options(**options))
        return reader if schema is None else reader.schema(schema)  # schema() mutates

    def ceiling(shape: str, partitions: int = QUEUES):  # type: ignore[no-untyped-def]
        return (spark.read.format("rocketha_ceiling").option("rows", str(rows))
                .option("shape", shape).option("partitions", str(partitions)).load())

    # as many tasks as the rocketha read plans for these rows (minRowsPerPartition's default)
    packed_tasks = len(pack_groups([rows // QUEUES] * QUEUES, MIN_ROWS_PER_PARTITION_DEFAULT))

    spark.dataSource.register(CeilingSource)
    selected_rows = spark.read.parquet(str(parquet_dir)).where(SELECTIVE).count()

    def selective(pushdown: bool) -> None:
        spark.conf.set(PUSHDOWN_CONF, str(pushdown).lower())
        try:
            got = rocketha(None).load().where(SELECTIVE).groupBy("queueId").agg(
                F.count("body").alias("rows")).collect()
        finally:
            spark.conf.set(PUSHDOWN_CONF, "false")
        assert sum(r.rows for r in got) == selected_rows, "selective read mismatch"

    runs = {
        "default": lambda: agg(rocketha(None).load(), rows),
        "lean7": lambda: agg(rocketha(None, columns=LEAN7).load(), rows),
        "projected": lambda: agg(rocketha(PROJECTED_DDL).load(), rows),
        "all": lambda: agg(rocketha(None, columns="*").load(), rows),
        "default_per_queue": lambda: agg(rocketha(None, minRowsPerPartition="0").load(), rows),
        "projected_per_queue": lambda: agg(rocketha(PROJECTED_DDL, minRowsPerPartition="0")
                                           .load(), rows),
        "parquet": lambda: agg(spark.read.parquet(str(parquet_dir)), rows),
        "ceiling_default": lambda: agg(ceiling("default"), rows),
        "ceiling_narrow": lambda: agg(ceiling("narrow"), rows),
        "ceiling_all": lambda: agg(ceiling("all"), rows),
        "ceiling_narrow_packed": lambda: agg(ceiling("narrow", packed_tasks), rows),
        "selective_pushdown": lambda: selective(True),
        "selective_no_pushdown": lambda: selective(False),
    }
    if only:
        _read_subset({name: runs[name] for name in (*only, "parquet")}, rows, repeat, figures,
                     meter)
        return
    best, cpu = best_seconds_by_case(runs, repeat, meter)
    parquet_s = best["parquet"]
    figures["parquet_agg_rows_per_s"] = rows / parquet_s
    for case, (what, rate_key, ratio_key) in READ_CASES.items():
        figures[rate_key] = rows / best[case]
        figures[ratio_key] = parquet_s / best[case]
        print(f"read agg  rocketha {case:9}: {rows / best[case]:12,.0f} rows/s "
              f"({best[case]:.2f} s, best of {repeat}; {what}): "
              f"{parquet_s / best[case]:.2f} x Parquet")
    print(f"read agg  parquet          : {rows / parquet_s:12,.0f} rows/s ({parquet_s:.2f} s)")
    for shape, key in (("all", "ceiling_agg_rows_per_s"),
                       ("default", "ceiling_default_agg_rows_per_s"),
                       ("narrow", "ceiling_narrow_agg_rows_per_s")):
        figures[key] = rows / best[f"ceiling_{shape}"]
        figures[f"{key[:-len('_agg_rows_per_s')]}_vs_parquet_ratio"] = \
            parquet_s / best[f"ceiling_{shape}"]
    figures["ceiling_narrow_packed_vs_parquet_ratio"] = parquet_s / best["ceiling_narrow_packed"]
    print(f"no-IO Python source, 2 columns in {packed_tasks} tasks (as the rocketha read plans): "
          f"{rows / best['ceiling_narrow_packed']:,.0f} rows/s: "
          f"{figures['ceiling_narrow_packed_vs_parquet_ratio']:.2f} x Parquet")
    print(f"no-IO Python source, same aggregation: {figures['ceiling_agg_rows_per_s']:,.0f} "
          f"rows/s with 11 columns, {figures['ceiling_default_agg_rows_per_s']:,.0f} with "
          f"the default 7, {figures['ceiling_narrow_agg_rows_per_s']:,.0f} with 2 (Spark "
          "4.2 prunes no columns of Python sources)")
    figures["selective_pushdown_s"] = best["selective_pushdown"]
    figures["selective_no_pushdown_s"] = best["selective_no_pushdown"]
    figures["pushdown_speedup"] = best["selective_no_pushdown"] / best["selective_pushdown"]
    print(f"selective read ({SELECTIVE}, {selected_rows:,} of {rows:,} rows): "
          f"{best['selective_pushdown']:.2f} s with filter pushdown, "
          f"{best['selective_no_pushdown']:.2f} s without: "
          f"{figures['pushdown_speedup']:.1f}x")
    for case, parts in cpu.items():
        for part, seconds in parts.items():
            figures[f"cpu_{case}_{part}_us_per_row"] = seconds / rows * 1e6
        print(f"CPU per row, {case:9}: " + ", ".join(
            f"{part} {seconds / rows * 1e6:.2f} us" for part, seconds in parts.items())
            + f"; wall {best[case] / rows * 1e6:.2f} us")


def _read_subset(runs: dict[str, Callable[[], None]], rows: int, repeat: int,
                 figures: dict[str, float], meter: CpuMeter | None) -> None:
    best, cpu = best_seconds_by_case(runs, repeat, meter)
    parquet_s = best["parquet"]
    figures["parquet_agg_rows_per_s"] = rows / parquet_s
    for case in runs:
        if case == "parquet":
            continue
        what, rate_key, ratio_key = READ_CASES[case]
        figures[rate_key] = rows / best[case]
        figures[ratio_key] = parquet_s / best[case]
        print(f"read agg  rocketha {case:9}: {rows / best[case]:12,.0f} rows/s "
              f"({best[case]:.2f} s, best of {repeat}; {what}): "
              f"{parquet_s / best[case]:.2f} x Parquet; CPU per row "
              + ", ".join(f"{part} {seconds / rows * 1e6:.2f} us"
                          for part, seconds in cpu.get(case, {}).items()))
    print(f"read agg  parquet          : {rows / parquet_s:12,.0f} rows/s ({parquet_s:.2f} s)")


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


def bench_environment() -> Path:
    """Spark's Python workers run this interpreter with this tree importable (on loopback);
    returns a fresh work directory under .bench-tmp/ (the caller removes it)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(dir=root))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--full", action="store_true", help="10 M rows (the issue's size)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-sink", action="store_true", help="read cases only")
    parser.add_argument("--cases", default="", help="only these read cases, e.g. default,lean7 "
                        f"(of {', '.join(READ_CASES)}); implies --no-sink")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable)")
    args = parser.parse_args(argv)
    rows = 10_000_000 if args.full else args.rows
    only = tuple(name.strip() for name in args.cases.split(",") if name.strip())
    unknown = sorted(set(only) - set(READ_CASES))
    if unknown:
        parser.error(f"--cases: unknown {unknown}; known: {', '.join(READ_CASES)}")
    assert 0 < rows <= ROWS_MAX and args.repeat >= 1
    work = bench_environment()
    broker = BrokerProcess(work / "broker", mappedFileSizeCommitLog=str(1 << 30),
                           maxMessageSize=str(4 << 20), defaultTopicQueueNums=str(QUEUES)
                           ).start()
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g"))
    for setting in args.conf:
        key, _, value = setting.partition("=")
        spark = spark.config(key, value)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, float] = {"rows": float(rows)}
    try:
        parquet_dir = work / "parquet"
        figures["produce_rows_per_s"] = load(broker, "bench_read", rows, parquet_dir)
        print(f"loaded {rows:,} rows of {BODY_BYTES} B: "
              f"{figures['produce_rows_per_s']:,.0f} rows/s produced")
        jvm = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
        meter = CpuMeter(jvm.pid, broker.process.pid) if broker.process else None
        read_cases(spark, broker, parquet_dir, rows, args.repeat, figures, meter, only)
        if args.no_sink or only:
            return _finish(figures, args.json)
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
    return _finish(figures, args.json)


def _finish(figures: dict[str, float], as_json: bool) -> int:
    if as_json:
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

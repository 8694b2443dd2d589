"""End-to-end benchmark: from `send` to the row being visible in a streaming query's sink, and
where the time goes; and a soak that watches every process's memory.

    python3 build.py bench e2e [--json] [--seconds S] [--rates 1000,10000,100000]
                               [--sink memory|delta]
                               [--soak-minutes N [--soak-rate R] [--soak-live-heap]]

Method: one real broker (ASYNC_FLUSH) with a topic of QUEUES queues on 127.0.0.1, and a
local[2] SparkSession in this process running
`readStream.format("rocketha").option("startingOffsets", "latest")` with Spark's default
trigger (the next micro-batch starts as soon as the last one ended: the same trigger as
`processingTime="0 seconds"`). The sink is Spark's memory sink (`--sink memory`), or a Delta
table written the way `spark_app.ingest_to_table` writes it on a machine without delta-spark's
JARs (`--sink delta`: the job's own plan/transform/start_query, `--delta-engine deltalake`, so
each micro-batch is committed by `table_sink.DeltaBatchCommitter` through foreachBatch). For
each rate R, a separate process (tests/bench/e2e_producer.py) sends R msgs/s for S seconds on
an open-loop schedule, each body the wall-clock time the message was due. A row is visible
once its micro-batch has added it to the sink (for Delta: committed the table version): the
batch's start (`timestamp` of its progress report) plus its `triggerExecution` less its
`commitOffsets` time; a row belongs to the first batch whose end offset for its queue is past
its queue offset. Latency = visible - due, p50/p99/max over every row. Where the time goes,
averaged over rows: waiting for the micro-batch that takes the row to start (from due to the
batch's start: the previous batch's run and the poll for new offsets), then that batch's
`latestOffset`, `walCommit`, `getBatch`, `queryPlanning` and `addBatch` (task start, pulls
from the broker, the sink's write). The producer is one Python process: the rate it reached is
reported beside the one asked for.

Soak (`--soak-minutes N`, instead of the rate cases): R msgs/s (`--soak-rate`, default 1000)
for N minutes into Spark's `noop` sink (the memory sink keeps every row, so its growth would be
by design); the rows of every batch, from the progress reports, must add up to the messages in
the topic (each read once). Resident memory (VmRSS, and its
anonymous part) of the broker, the Spark driver's JVM, the driver's Python process and the
Python processes the JVM started (the streaming source's runner and the read workers, summed)
is sampled every SOAK_SAMPLE_S; the first sample is taken SOAK_SETTLE_S after the load starts
(JIT, heap sizing and the first mapped segments are start-up, not growth).
`soak_rss_growth_ratio` is the largest last/first ratio of VmRSS over those four, and
`soak_anon_growth_ratio` the same of the anonymous part (VmRSS also counts the pages of the
broker's mapped segments it keeps resident: commitLogResidentWindowBytes bounds them).
Beside each sample, the driver JVM's heap from its management beans (no forced GC): used
after the latest collection and committed; `soak_jvm_heap_after_gc_growth_ratio` and
`soak_jvm_heap_committed_growth_ratio` are their last/first ratios. With `--soak-live-heap`
its live heap (used after a System.gc() full collection) is also taken before the load and
after the last sample: `soak_jvm_live_heap_growth_ratio` (a leak grows it; a heap sizing
itself does not). Off by default with `--soak-heap grow`: that first full GC shrinks the
heap, so the driver's RSS ratio then measures the heap growing back.

`--soak-heap fixed` (the default) runs the driver as a long-lived streaming driver should
run (docs/spark.md, "Long-running streaming drivers"): a fixed, pre-touched heap
(`-Xms` = `-Xmx` = SOAK_HEAP, `-XX:+AlwaysPreTouch`), so G1 sizing its heap is not mistaken
for growth and a full GC cannot shrink it. The driver's VmRSS then grows only with what lives
outside the heap (metaspace, code, threads, direct and native buffers), and the heap's own
growth is its live data: with a fixed heap the live heap (after System.gc()) is taken at every
sample, and `soak_jvm_live_heap_growth_ratio` is last/first of it (a leak keeps climbing;
Spark's bounded histories, e.g. `spark.sql.ui.retainedExecutions` = 1,000 executions, climb
until full and then stay). `--soak-heap grow` keeps Spark's default sizing (`-Xmx` only), as
the runs before 2026-12-03 did.

With --json the last line has `e2e_p50_s_<rate>` and `e2e_p99_s_<rate>` (rate as 1k, 10k...;
with `--sink delta` as `e2e_delta_p50_s_<rate>`...), or the soak's ratios; the whole
result is written to .bench-tmp/e2e[-delta|-soak].json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Producer
from tests.bench.bench_peers import machine
from tests.bench.bench_spark import bench_environment
from tests.bench.scale_probe import load_average, percentile, rss_bytes, rss_split_bytes
from tests.integration.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
QUEUES = 4
CATCH_UP_TIMEOUT_S = 600.0
PHASES = ("latestOffset", "walCommit", "getBatch", "queryPlanning", "addBatch")
SOAK_SETTLE_S = 60.0
SOAK_SAMPLE_S = 60.0
SOAK_HEAP = "2g"  # the soak's fixed driver heap (noop sink: the live heap is ~60-70 MiB)
COLUMNS = ("brokerName", "queueId", "queueOffset", "body")


def _progress(query: Any) -> list[dict[str, Any]]:
    return [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]


def _end_offsets(progress: dict[str, Any], topic: str) -> dict[str, int]:
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return dict((end or {}).get(topic, {}))


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


Batches = dict[str, list[tuple[int, dict[str, Any]]]]  # queue key -> [(end offset, facts)]


def _batches(progress: list[dict[str, Any]], topic: str) -> Batches:
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


def _create_topic(config: ClientConfig, topic: str) -> None:
    Admin(config).create_topic(topic, queues=QUEUES)
    with Producer(config) as producer:  # every queue exists in the source's first listing
        for queue_id in range(QUEUES):
            producer.send(topic, struct.pack(">d", 0.0), queue_id=queue_id)


def _warm_up(config: ClientConfig, topic: str, query: Any) -> None:
    """A batch with rows has run (Python workers started, offsets known); its rows carry due
    time 0 and are left out."""
    with Producer(config) as producer:
        while not any(p.get("numInputRows") for p in _progress(query)):
            assert query.exception() is None, query.exception()
            producer.send(topic, struct.pack(">d", 0.0))
            time.sleep(0.2)


def _start_producer(endpoint: str, topic: str, rate: int, seconds: float, work: Path
                    ) -> subprocess.Popen[str]:
    """The load's process; its stderr goes to a file (a pipe nobody reads during a long
    soak could fill and stall it)."""
    with (work / f"producer-{topic}.err").open("w") as err:
        return subprocess.Popen([sys.executable, str(ROOT / "tests/bench/e2e_producer.py"),
                                 endpoint, topic, str(rate), str(seconds)],
                                stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)


def _producer_done(producer: subprocess.Popen[str], work: Path, topic: str
                   ) -> tuple[int, float]:
    """(messages acknowledged, seconds the sends took)."""
    out, _ = producer.communicate()
    err = (work / f"producer-{topic}.err").read_text()
    assert producer.returncode == 0, err[-2000:]
    acked, elapsed_s = out.split()[-2:]
    return int(acked), float(elapsed_s)


def _targets(config: ClientConfig, broker: BrokerProcess, topic: str) -> dict[str, int]:
    broker_name = broker.action("broker_info").get("broker_name", "broker-a")
    return {f"{broker_name}:{q['queue_id']}": q["max_queue_offset"]
            for q in Admin(config).queue_offsets(topic)}


def _start_query(spark: SparkSession, endpoint: str, topic: str, sink: str, work: Path
                 ) -> tuple[Any, Path | None]:
    """The streaming query of one case, and the Delta table's path (None for other sinks)."""
    checkpoint = work / f"checkpoint-{topic}"
    if sink == "delta":
        from spark_app.ingest_to_table import plan, resolve_engine, start_query, transform
        table = work / f"table-{topic}"
        ingest = plan(["--brokers", endpoint, "--topics", topic, "--table", str(table),
                       "--checkpoint", str(checkpoint), "--format", "delta",
                       "--delta-engine", "deltalake", "--trigger", "processing:0s",
                       "--starting-offsets", "latest", "--query-name", topic])
        frame = transform(spark.readStream.format("rocketha")
                          .options(**ingest.source_options).load(), ingest)
        return start_query(frame, ingest, resolve_engine(spark, ingest)), table
    frame = (spark.readStream.format("rocketha").option("brokers", endpoint)
             .option("subscribe", topic).option("startingOffsets", "latest").load()
             .select(*COLUMNS))
    writer = frame.writeStream.option("checkpointLocation", str(checkpoint))
    if sink == "noop":
        return writer.format("noop").start(), None
    return writer.format("memory").queryName(topic).start(), None


def _rows(spark: SparkSession, topic: str, table: Path | None) -> pa.Table:
    if table is None:
        return spark.table(topic).select(*COLUMNS).toArrow()
    from deltalake import DeltaTable
    return DeltaTable(str(table)).to_pyarrow_table(columns=list(COLUMNS))


def latencies(rows: pa.Table, batches: Batches
              ) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Per row with a due time: latency and wait for its batch (seconds), and each phase's
    seconds summed over those rows."""
    bodies = rows.column("body").combine_chunks()
    raw = np.frombuffer(bodies.buffers()[2], dtype=np.uint8)
    offsets = np.frombuffer(bodies.buffers()[1], dtype=np.int32)[
        bodies.offset:bodies.offset + len(bodies) + 1]
    due = np.frombuffer(np.stack([raw[start:start + 8] for start in offsets[:-1]]).tobytes()
                        if len(rows) else b"", dtype=">f8")
    keys = (rows.column("brokerName").to_numpy(zero_copy_only=False).astype(object) + ":"
            + rows.column("queueId").to_numpy().astype(str).astype(object))
    queue_offsets = rows.column("queueOffset").to_numpy()
    late, waits = [], []
    phases = dict.fromkeys(PHASES, 0.0)
    for key, ends in batches.items():
        pick = (keys == key) & (due != 0.0)  # due 0: the queues' first messages and warm-up
        if not pick.any():
            continue
        index = np.searchsorted(np.array([end for end, _ in ends]), queue_offsets[pick],
                                side="right")
        visible = np.array([facts["visible_s"] for _, facts in ends])[index]
        start = np.array([facts["start_s"] for _, facts in ends])[index]
        late.append(visible - due[pick])
        waits.append(start - due[pick])
        for phase in PHASES:
            phases[phase] += float(np.array([facts[phase] for _, facts in ends])[index].sum())
    return (np.concatenate(late) if late else np.array([]),
            np.concatenate(waits) if waits else np.array([]), phases)


def rate_case(spark: SparkSession, broker: BrokerProcess, rate: int, seconds: float,
              work: Path, sink: str) -> dict[str, Any]:
    topic = f"e2e_{sink}_{rate}"
    config = ClientConfig(brokers=(broker.endpoint,))
    _create_topic(config, topic)
    query, table = _start_query(spark, broker.endpoint, topic, sink, work)
    try:
        _warm_up(config, topic, query)
        load = load_average()
        sent, send_s = _producer_done(
            _start_producer(broker.endpoint, topic, rate, seconds, work), work, topic)
        _wait_caught_up(query, topic, _targets(config, broker, topic))
        progress = _progress(query)
    finally:
        query.stop()
    late, waits, phases = latencies(_rows(spark, topic, table), _batches(progress, topic))
    assert len(late) == sent, (len(late), sent)
    count = len(late)
    result = {"rate_per_s": rate, "sink": sink, "rows": count, "load_1m": load,
              "sent_per_s": round(sent / send_s), "load_end_1m": load_average(),
              "batches": sum(1 for p in progress if p.get("numInputRows")),
              "p50_s": round(percentile(list(late), 0.5), 3),
              "p99_s": round(percentile(list(late), 0.99), 3),
              "max_s": round(float(late.max()), 3),
              "where_s": {"wait_for_batch": round(float(waits.sum()) / count, 3),
                          **{phase: round(total / count, 3)
                             for phase, total in phases.items()}}}
    print(f"{rate:,} msgs/s ({result['sent_per_s']:,} sent/s) into {sink}: p50 "
          f"{result['p50_s']:.3f} s, p99 {result['p99_s']:.3f} s, max {result['max_s']:.3f} s "
          f"over {count:,} rows in {result['batches']} batches; mean per row: "
          f"{result['where_s']} (load {load} to {result['load_end_1m']})", flush=True)
    return result


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _memory(broker_pid: int, jvm_pid: int) -> dict[str, tuple[int, int]]:
    """Process group -> (VmRSS, anonymous resident) bytes."""
    def measure(pids: list[int]) -> tuple[int, int]:
        total = anon = 0
        for pid in pids:
            try:
                total += rss_bytes(pid)
                anon += rss_split_bytes(pid)[0]
            except (OSError, KeyError):  # a worker that just exited
                continue
        return total, anon

    def is_python(pid: int) -> bool:
        try:
            return "python" in Path(f"/proc/{pid}/comm").read_text(errors="replace")
        except OSError:  # exited meanwhile
            return False

    workers = [pid for pid in _descendants(jvm_pid) if is_python(pid)]
    return {"broker": measure([broker_pid]), "driver_jvm": measure([jvm_pid]),
            "driver_python": measure([os.getpid()]), "python_workers": measure(workers)}


def _jvm_heap(spark: SparkSession) -> dict[str, int]:
    """The driver JVM's heap, from its own management beans (py4j; no forced GC, which would
    shrink the heap and change the RSS being watched): `after_gc` is the heap used just after
    the latest collection (live data plus what that collection left), `committed` what the
    heap holds from the OS (it counts in VmRSS once touched), `max` its -Xmx."""
    factory = spark.sparkContext._jvm.java.lang.management.ManagementFactory  # type: ignore
    heap_pools = {str(pool.getName()) for pool in factory.getMemoryPoolMXBeans()
                  if str(pool.getType().name()) == "HEAP"}
    latest = None
    for bean in factory.getGarbageCollectorMXBeans():
        info = bean.getLastGcInfo()  # com.sun.management's extension: None before any GC
        if info is not None and (latest is None or info.getEndTime() > latest.getEndTime()):
            latest = info
    usage = factory.getMemoryMXBean().getHeapMemoryUsage()
    after_gc = 0 if latest is None else sum(
        int(pool_usage.getUsed()) for name, pool_usage in latest.getMemoryUsageAfterGc().items()
        if str(name) in heap_pools)
    return {"after_gc": after_gc, "used": int(usage.getUsed()),
            "committed": int(usage.getCommitted()), "max": int(usage.getMax())}


def _live_heap_bytes(spark: SparkSession) -> int:
    """The driver's heap used after a full collection (System.gc(): G1 runs a full GC), i.e.
    its live data. Taken only before the load and after the last sample: a full GC can shrink
    the heap, which would change the RSS being sampled."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.java.lang.System.gc()
    usage = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    return int(usage.getUsed())


def soak(spark: SparkSession, broker: BrokerProcess, rate: int, minutes: float, work: Path,
         *, live_heap: bool = False, live_heap_every_sample: bool = False) -> dict[str, Any]:
    """With `live_heap_every_sample` (a fixed heap: a full GC cannot shrink it) each sample
    also takes the driver's live heap; with `live_heap` only before the load and at the end."""
    topic = f"e2e_soak_{rate}"
    config = ClientConfig(brokers=(broker.endpoint,))
    _create_topic(config, topic)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100")  # Spark's default
    query, _ = _start_query(spark, broker.endpoint, topic, "noop", work)
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore
    assert broker.process is not None
    rows_by_batch: dict[int, int] = {}
    first_start: dict[str, int] = {}  # where the query started (its first batch's start)
    samples: list[dict[str, Any]] = []

    def count_rows() -> None:
        for report in _progress(query):
            rows_by_batch[report["batchId"]] = report.get("numInputRows", 0)
            if report["batchId"] == 0:  # its start is null (the initial offset): its end
                first_start.update(_end_offsets(report, topic))
                rows_by_batch[0] = 0  # only its rows past the initial offset count (none)

    try:
        _warm_up(config, topic, query)
        count_rows()
        warm_batches = set(rows_by_batch)
        live_heap_start = _live_heap_bytes(spark) if live_heap else 0
        load_start = load_average()
        started = time.monotonic()
        producer = _start_producer(broker.endpoint, topic, rate, minutes * 60, work)
        next_sample = started + SOAK_SETTLE_S
        while producer.poll() is None:
            assert query.exception() is None, query.exception()
            count_rows()
            if time.monotonic() >= next_sample:
                samples.append({"at_s": round(time.monotonic() - started),
                                "load_1m": load_average(),
                                "memory": _memory(broker.process.pid, jvm_pid),
                                "jvm_heap": _jvm_heap(spark)})
                if live_heap_every_sample:
                    samples[-1]["jvm_live_heap"] = _live_heap_bytes(spark)
                print(f"soak {samples[-1]['at_s']} s: {samples[-1]}", flush=True)
                next_sample += SOAK_SAMPLE_S
            time.sleep(1.0)
        sent, send_s = _producer_done(producer, work, topic)
        targets = _targets(config, broker, topic)
        _wait_caught_up(query, topic, targets)
        count_rows()
        samples.append({"at_s": round(time.monotonic() - started), "load_1m": load_average(),
                        "memory": _memory(broker.process.pid, jvm_pid),
                        "jvm_heap": _jvm_heap(spark)})
        if live_heap_every_sample:
            samples[-1]["jvm_live_heap"] = _live_heap_bytes(spark)
        live_heap_end = _live_heap_bytes(spark) if live_heap else 0
    finally:
        query.stop()
    assert len(samples) >= 2, "the soak is shorter than its settling time"
    first, last = samples[0]["memory"], samples[-1]["memory"]
    growth = {name: round(last[name][0] / first[name][0], 3) for name in first}
    anon_growth = {name: round(last[name][1] / first[name][1], 3) for name in first}
    heap_first, heap_last = samples[0]["jvm_heap"], samples[-1]["jvm_heap"]
    heap_growth = {name: round(heap_last[name] / heap_first[name], 3)
                   for name in ("after_gc", "committed") if heap_first[name]}
    if live_heap_every_sample:
        heap_growth["live"] = round(samples[-1]["jvm_live_heap"] / samples[0]["jvm_live_heap"], 3)
    elif live_heap:
        heap_growth["live"] = round(live_heap_end / live_heap_start, 3)
    read = sum(n for b, n in rows_by_batch.items() if b not in warm_batches)
    # every message from where the query started, once
    expected = sum(targets.values()) - sum(first_start.get(key, 0) for key in targets)
    assert sum(rows_by_batch.values()) == expected, (sum(rows_by_batch.values()), expected)
    result = {"rate_per_s": rate, "minutes": minutes, "sent": sent,
              "sent_per_s": round(sent / send_s), "read": read, "load_start_1m": load_start,
              "load_end_1m": load_average(), "rss_growth": growth,
              "anon_growth": anon_growth, "jvm_heap_growth": heap_growth, "samples": samples,
              "jvm_live_heap_bytes": [live_heap_start, live_heap_end] if live_heap else None,
              "soak_rss_growth_ratio": max(growth.values())}
    print(f"soak {minutes} min at {rate:,} msgs/s: {sent:,} sent, {read:,} read; VmRSS last/"
          f"first {growth}, anonymous {anon_growth}, driver heap {heap_growth} (load "
          f"{load_start} to {result['load_end_1m']})", flush=True)
    return result


def _label(rate: int) -> str:
    return f"{rate // 1000}k" if rate >= 1000 and rate % 1000 == 0 else str(rate)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=20.0, help="of load per rate")
    parser.add_argument("--rates", default="1000,10000")
    parser.add_argument("--sink", choices=("memory", "delta"), default="memory")
    parser.add_argument("--soak-minutes", type=float, default=0.0,
                        help="run the soak for this long instead of the rate cases")
    parser.add_argument("--soak-rate", type=int, default=1000, help="msgs/s during the soak")
    parser.add_argument("--soak-live-heap", action="store_true",
                        help="also take the driver's live heap (a full GC) before the load and "
                             "after it; the GC shrinks the heap, so the RSS ratios then count "
                             "its regrowth (with --soak-heap grow; a fixed heap takes it at "
                             "every sample)")
    parser.add_argument("--soak-heap", choices=("fixed", "grow"), default="fixed",
                        help=f"fixed: the driver's heap is -Xms=-Xmx={SOAK_HEAP}, pre-touched "
                             "(a long-lived driver's settings); grow: Spark's default sizing")
    args = parser.parse_args(argv)
    rates = [int(rate) for rate in args.rates.split(",") if rate]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    work = bench_environment()
    broker = BrokerProcess(work / "broker", flushDiskType="ASYNC_FLUSH",
                           mappedFileSizeCommitLog=str(256 << 20)).start()
    builder = SparkSession.builder
    fixed_heap = bool(args.soak_minutes) and args.soak_heap == "fixed"
    if fixed_heap:  # -Xmx comes from spark.driver.memory; Spark refuses -Xmx in the options
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Xms{SOAK_HEAP} -XX:+AlwaysPreTouch")
    spark = (builder.master("local[2]").appName("bench-e2e")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             # a Python worker's start-up under load 20 can pass the 15 s default
             .config("spark.python.authenticate.socketTimeout", "120s")
             # the memory sink keeps every row in the driver: 100k msgs/s for 20 s is 2 M
             # rows, past the 1 GB default heap
             .config("spark.driver.memory", SOAK_HEAP if fixed_heap else "4g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, float] = {}
    result: dict[str, Any] = {"date": started, "machine": machine()}
    try:
        if args.soak_minutes:
            case = soak(spark, broker, args.soak_rate, args.soak_minutes, work,
                        live_heap=args.soak_live_heap and not fixed_heap,
                        live_heap_every_sample=fixed_heap)
            case["driver_heap"] = f"fixed {SOAK_HEAP}, pre-touched" if fixed_heap else "grow"
            result["soak"] = case
            figures["soak_rss_growth_ratio"] = case["soak_rss_growth_ratio"]
            figures["soak_anon_growth_ratio"] = max(case["anon_growth"].values())
            heap_growth = case["jvm_heap_growth"]
            if "after_gc" in heap_growth:
                figures["soak_jvm_heap_after_gc_growth_ratio"] = heap_growth["after_gc"]
            if "committed" in heap_growth:
                figures["soak_jvm_heap_committed_growth_ratio"] = heap_growth["committed"]
            if "live" in heap_growth:
                figures["soak_jvm_live_heap_growth_ratio"] = heap_growth["live"]
        else:
            cases = result["cases"] = []
            prefix = "e2e_" if args.sink == "memory" else f"e2e_{args.sink}_"
            for rate in rates:
                case = rate_case(spark, broker, rate, args.seconds, work, args.sink)
                cases.append(case)
                figures[f"{prefix}p50_s_{_label(rate)}"] = case["p50_s"]
                figures[f"{prefix}p99_s_{_label(rate)}"] = case["p99_s"]
    finally:
        spark.stop()
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    result.update(seconds_per_rate=args.seconds, keys=figures)
    name = ("e2e-soak" if args.soak_minutes
            else "e2e" if args.sink == "memory" else f"e2e-{args.sink}")
    (work.parent / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

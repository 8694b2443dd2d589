"""Tiered storage benchmark: upload MB/s (file:// and a local S3), cold reads rows/s.

    python3 build.py bench tier [--json] [--mb MB]

Method, all in one run on one data set: this process fills a store (8 MiB segments, 200 B
bodies over 4 queues) under ./.bench-tmp, then
  1. uploads every sealed segment to the default file:// tier (the Uploader, 2 at once, no
     bandwidth cap): upload_file_MBps = object bytes / wall time (write + read-back verify +
     manifest commit);
  2. uploads the same segments to moto's S3 server on 127.0.0.1 (a Python HTTP server: a
     floor for real S3, not a ceiling): upload_s3_MBps;
  3. reads every tiered row directly from the file:// tier with storage_engine.tiered.reader
     (plan_tier_ranges + read_tier_range + block_to_arrow), in this process, WITHOUT Spark:
     cold_direct_reader_rows_per_s;
  4. closes the store and starts a real broker on it (tiering off) and reads every row over
     Flight from queue_offset 0: hot_broker_rows_per_s; restarts it with tiering on and
     fileReservedTime=0, waits until the tiered segments are gone locally, and reads the same
     rows again: cold_broker_flight_rows_per_s (the broker's consume path, served from the
     tier through its block cache);
  5. with that broker still up, a local[2] Spark session runs
     `groupBy(queueId).agg(sum(length(body)))` over the topic twice (best of two each):
     through the broker (cold_broker_rows_per_s) and with readColdFromTier=true, executors
     reading the objects directly (cold_direct_rows_per_s); then both again with
     `.schema("queueId INT, body BINARY")` (cold_broker_projected_rows_per_s,
     cold_direct_projected_rows_per_s: only body is pulled or decoded).
Same-run ratios printed: Spark direct / Spark via broker, broker cold / hot.
Step 3's figure (no Spark) is cold_direct_reader_rows_per_s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pyarrow import flight
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector.protocol import CONSUME_SCHEMA, GetReply, GetTicket
from storage_engine import MessageBatch, MessageStore, StoreConfig, block_to_arrow
from storage_engine.config import TieredStoreConfig
from storage_engine.tiered import (
    BlockCache,
    FileIO,
    TierService,
    load_manifest,
    plan_tier_ranges,
    read_tier_range,
)
from tests.integration.broker_process import BrokerProcess
from tests.tiered.moto_s3 import moto_s3_server

MiB = 1 << 20
SEGMENT_BYTES = 8 * MiB
TOPIC = "Bench"
QUEUES = 4
BATCH_ROWS = 4096
WAIT_S = 120.0


def fill(store: MessageStore, total_mb: int) -> int:
    body_pool = os.urandom(200 * BATCH_ROWS)
    bodies = [body_pool[i * 200:(i + 1) * 200] for i in range(BATCH_ROWS)]
    rows = 0
    while store.log_position_end < total_mb * MiB:
        result = store.put_messages(MessageBatch(
            topic=TOPIC, bodies=bodies, queue_ids=[i % QUEUES for i in range(BATCH_ROWS)]))
        assert result.status.name == "PUT_OK", result
        rows += BATCH_ROWS
    return rows


def upload_MBps(store: MessageStore, tiered: TieredStoreConfig) -> tuple[float, int]:
    tier = TierService(store, tiered, broker_name="broker-a", writer="bench")
    start = time.perf_counter()
    count = tier.uploader.drain()
    elapsed = time.perf_counter() - start
    stats = tier.uploader.stats()
    assert stats["upload_failures"] == 0 and count, stats
    return stats["uploaded_bytes"] / elapsed / 1e6, count


def direct_rows_per_s(url: str) -> tuple[float, int]:
    file_io = FileIO(url)
    manifest = load_manifest(file_io, "broker-a")
    cache = BlockCache(4 * MiB, 2, 64 * MiB)
    rows = 0
    start = time.perf_counter()
    for queue_id in range(QUEUES):
        for tier_range in plan_tier_ranges(manifest, TOPIC, queue_id, 0, 1 << 62):
            for block in read_tier_range(file_io, tier_range, rows_per_block=65536,
                                         cache=cache):
                rows += block_to_arrow(block.data, block.sizes, TOPIC, CONSUME_SCHEMA).num_rows
    return rows / (time.perf_counter() - start), rows


def _read_everything(broker: BrokerProcess) -> tuple[int, float]:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    rows = 0
    start = time.perf_counter()
    for queue_id in range(QUEUES):
        cursor = 0
        while True:
            reader = client.do_get(flight.Ticket(GetTicket(
                TOPIC, queue_id, cursor, max_messages=65536, max_bytes=64 * MiB).encode()))
            last = None
            for chunk in iter(reader.read_chunk, None):
                rows += chunk.data.num_rows
                last = GetReply.decode(chunk.app_metadata.to_pybytes())
            assert last is not None
            if last.status != "FOUND" or last.next_queue_offset >= last.max_queue_offset:
                break
            cursor = last.next_queue_offset
    elapsed = time.perf_counter() - start
    client.close()
    return rows, elapsed


PROJECTED_DDL = "queueId INT, body BINARY"  # the columns the aggregation uses


def spark_rows_per_s(broker: BrokerProcess, expected_rows: int) -> dict[str, float]:
    """Rows/s of one aggregation over the whole topic, best of two: via the broker and direct
    from the tier, each with the full schema and with the declared PROJECTED_DDL."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors: this venv's packages
    spark = (SparkSession.builder.master("local[2]").appName("bench-tier")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    cases = {"cold_broker_rows_per_s": ("false", None),
             "cold_direct_rows_per_s": ("true", None),
             "cold_broker_projected_rows_per_s": ("false", PROJECTED_DDL),
             "cold_direct_projected_rows_per_s": ("true", PROJECTED_DDL)}
    try:
        figures = {}
        for key, (cold, ddl) in cases.items():
            best = 0.0
            for _ in range(2):
                reader = (spark.read.format("rocketha").option("brokers", broker.endpoint)
                          .option("subscribe", TOPIC).option("readColdFromTier", cold))
                # ddl None: every column (the source's default is the lean 7)
                frame = (reader.option("columns", "*") if ddl is None
                         else reader.schema(ddl)).load()
                start = time.perf_counter()
                result = frame.groupBy("queueId").agg(
                    F.count("*").alias("rows"), F.sum(F.length("body")).alias("bytes")).collect()
                elapsed = time.perf_counter() - start
                rows = sum(row["rows"] for row in result)
                assert rows == expected_rows, (key, rows, expected_rows)
                best = max(best, rows / elapsed)
            figures[key] = best
        return figures
    finally:
        spark.stop()


def broker_rows_per_s(directory: Path, store_dir: Path, expected_rows: int
                      ) -> tuple[float, float, dict[str, float]]:
    """(hot, cold, the Spark figures of spark_rows_per_s) rows/s: the same rows read through a
    broker from local segments, then, after a restart with tiering on and the tiered segments
    deleted locally, from the tier; then through Spark both ways."""
    broker = BrokerProcess(directory, mappedFileSizeCommitLog=str(SEGMENT_BYTES),
                           maxMessageSize=str(MiB))
    shutil.move(str(store_dir), str(broker.store_dir))
    broker.start()
    try:
        broker.action("create_topic", {"topic": TOPIC, "read_queue_nums": QUEUES,
                                       "write_queue_nums": QUEUES})
        hot_rows, hot_s = _read_everything(broker)
    finally:
        broker.stop()
    conf = broker.conf.read_text()
    broker.conf.write_text(conf + "tieredStoreEnable=true\nfileReservedTime=0\n"
                           "tieredRetentionIntervalMs=100\ndeleteFileBatchMax=1000\n")
    broker.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            info = broker.action("broker_info")
            if info["min_log_position"] >= info["tiered"]["tier_min_log_position"] + \
                    info["tiered"]["tier_segments"] * SEGMENT_BYTES:
                break
            assert time.monotonic() < deadline, info
            time.sleep(0.1)
        rows, elapsed = _read_everything(broker)
        stats = broker.action("broker_info")["tiered"]
        assert stats["cold_reads"] > 0, stats
        assert rows == hot_rows >= expected_rows, (rows, hot_rows, expected_rows)
        return hot_rows / hot_s, rows / elapsed, spark_rows_per_s(broker, rows)
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--mb", type=int, default=64, help="data set size in MB")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2] / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tier-", dir=root))
    figures: dict[str, float] = {}
    try:
        tiered = TieredStoreConfig(enabled=True, upload_bytes_per_sec_max=1 << 40,
                                   upload_chunk_bytes=4 * MiB)
        config = StoreConfig(commit_log_segment_size_bytes=SEGMENT_BYTES,
                             message_size_max_bytes=MiB, tiered=tiered)
        store = MessageStore(work / "store", config)
        rows = fill(store, args.mb)
        figures["upload_file_MBps"], segments = upload_MBps(store, tiered)
        with moto_s3_server() as s3:
            s3.client().create_bucket(Bucket="bench")  # type: ignore[attr-defined]
            s3_config = dataclasses.replace(
                tiered, url="s3://bench/tier", s3_endpoint_url=s3.endpoint_url,
                s3_region="us-east-1", s3_access_key_id=s3.access_key_id,
                s3_secret_access_key=s3.secret_access_key)
            figures["upload_s3_MBps"], _ = upload_MBps(store, s3_config)
        url = f"file://{(work / 'store' / 'tier').resolve()}"
        figures["cold_direct_reader_rows_per_s"], direct_rows = direct_rows_per_s(url)
        store.close()
        figures["hot_broker_rows_per_s"], figures["cold_broker_flight_rows_per_s"], by_spark = \
            broker_rows_per_s(work / "broker", work / "store", direct_rows)
        figures.update(by_spark)
        ratio = figures["cold_direct_rows_per_s"] / figures["cold_broker_rows_per_s"]
        figures["cold_direct_vs_broker_ratio"] = ratio
        cold_hot = figures["cold_broker_flight_rows_per_s"] / figures["hot_broker_rows_per_s"]
        print(f"data: {rows:,} rows of 200 B, {segments} sealed segments of 8 MiB tiered")
        print(f"upload file://          {figures['upload_file_MBps']:10.1f} MB/s")
        print(f"upload s3 (moto local)  {figures['upload_s3_MBps']:10.1f} MB/s")
        print(f"cold direct (no Spark)  {figures['cold_direct_reader_rows_per_s']:12,.0f} rows/s "
              f"({direct_rows:,} rows)")
        print(f"hot via broker          {figures['hot_broker_rows_per_s']:12,.0f} rows/s "
              "(same rows, local segments)")
        print(f"cold via broker         {figures['cold_broker_flight_rows_per_s']:12,.0f} rows/s")
        print(f"Spark cold via broker   {figures['cold_broker_rows_per_s']:12,.0f} rows/s")
        print(f"Spark cold direct       {figures['cold_direct_rows_per_s']:12,.0f} rows/s "
              "(readColdFromTier=true)")
        print(f"Spark cold, .schema(\"{PROJECTED_DDL}\"): via broker "
              f"{figures['cold_broker_projected_rows_per_s']:,.0f}, direct "
              f"{figures['cold_direct_projected_rows_per_s']:,.0f} rows/s")
        print(f"Spark direct / via broker = {ratio:.2f}; broker cold / hot = {cold_hot:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: round(value, 3) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

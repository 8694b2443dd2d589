"""ingest_to_table's table half: exactly-once into Delta (offline engine) and Parquet.

Goal: every input row lands in the table once across restarts from the checkpoint, including
the crash window between the table commit and Spark's own commit-log entry (Spark re-runs that
batch id); JSON bodies become columns; misuse exits 2 naming the flag. Method: a real local
SparkSession streams rocketha-shaped rows from Parquet files (the source half is the connector's,
tested with a broker elsewhere) through `start_query`, read back with deltalake.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_app import ingest_to_table
from spark_app.progress import lag_messages, watch

pytestmark = pytest.mark.spark

ROCKETHA_SCHEMA = (
    "topic STRING, brokerName STRING, queueId INT, queueOffset BIGINT, msgId STRING, "
    "key STRING, tags STRING, body BINARY, properties MAP<STRING,STRING>, "
    "bornTimestamp TIMESTAMP, storeTimestamp TIMESTAMP")


def _write_input(directory: Path, name: str, first: int, count: int) -> None:
    """One Parquet file of rocketha-shaped rows with JSON order bodies."""
    directory.mkdir(parents=True, exist_ok=True)
    seqs = range(first, first + count)
    bodies = [json.dumps({"order": n, "kind": "paid" if n % 2 else "created"}).encode()
              for n in seqs]
    table = pa.table({
        "topic": ["orders"] * count, "brokerName": ["broker-a"] * count,
        "queueId": pa.array([n % 4 for n in seqs], pa.int32()),
        "queueOffset": pa.array([n // 4 for n in seqs], pa.int64()),
        "msgId": [f"id-{n}" for n in seqs], "key": [f"c{n % 7}" for n in seqs],
        "tags": ["paid" if n % 2 else "created" for n in seqs],
        "body": pa.array(bodies, pa.binary()),
        "properties": pa.array([[("k", "v")]] * count, pa.map_(pa.string(), pa.string())),
        "bornTimestamp": pa.array([1_700_000_000_000_000 + n for n in seqs],
                                  pa.timestamp("us", "UTC")),
        "storeTimestamp": pa.array([1_700_000_000_000_000 + n for n in seqs],
                                   pa.timestamp("us", "UTC")),
    })
    pq.write_table(table, directory / f"{name}.parquet")


def _run(spark: SparkSession, source: Path, argv: list[str]) -> str:
    ingest = ingest_to_table.plan(["--brokers", "unused:1", "--topics", "orders",
                                   "--trigger", "available-now", *argv])
    frame = ingest_to_table.transform(
        spark.readStream.schema(ROCKETHA_SCHEMA).option("maxFilesPerTrigger", 1)
        .parquet(str(source)), ingest)
    engine = ingest_to_table.resolve_engine(spark, ingest)
    query = ingest_to_table.start_query(frame, ingest, engine)
    assert query.awaitTermination(120), "available-now query did not finish"
    return engine


def _orders(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_pyarrow_table().column("order").to_pylist())


def test_delta_offline_engine_is_exactly_once_across_restarts(spark: SparkSession,
                                                              tmp_path: Path) -> None:
    source, table, ckpt = tmp_path / "in", tmp_path / "table", tmp_path / "ckpt"
    argv = ["--table", str(table), "--checkpoint", str(ckpt),
            "--body-json-schema", "order BIGINT, kind STRING"]
    _write_input(source, "a", 0, 50)
    _write_input(source, "b", 50, 30)
    assert _run(spark, source, argv) == "deltalake"
    assert _orders(table) == list(range(80))

    _write_input(source, "c", 80, 20)
    _run(spark, source, argv)  # restart from the checkpoint: only the new file
    assert _orders(table) == list(range(100))

    # Crash window: the table has batch N but Spark's commit log does not. Spark re-runs N.
    commits = sorted((p for p in (ckpt / "commits").iterdir() if p.name.isdigit()),
                     key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (ckpt / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    version_before = DeltaTable(str(table)).version()
    _run(spark, source, argv)
    assert (ckpt / "commits" / last.name).exists(), "Spark did not re-run the batch"
    assert _orders(table) == list(range(100))
    assert DeltaTable(str(table)).version() == version_before
    columns = DeltaTable(str(table)).to_pyarrow_table().column_names
    assert {"order", "kind", "queueOffset", "tags"} <= set(columns) and "body" not in columns


def test_parquet_format_and_string_bodies(spark: SparkSession, tmp_path: Path) -> None:
    source, table, ckpt = tmp_path / "in", tmp_path / "table", tmp_path / "ckpt"
    _write_input(source, "a", 0, 40)
    argv = ["--table", str(table), "--checkpoint", str(ckpt), "--format", "parquet",
            "--body-as", "string", "--partition-by", "tags"]
    assert _run(spark, source, argv) == "parquet"
    rows = spark.read.parquet(str(table)).select("body", "tags").collect()
    assert sorted(json.loads(row.body)["order"] for row in rows) == list(range(40))
    assert {row.tags for row in rows} == {"paid", "created"}


@pytest.mark.parametrize(("argv", "flag"), [
    (["--trigger", "sometimes"], "--trigger"),
    (["--starting-offsets", "{not json"], "--starting-offsets"),
    (["--max-offsets-per-trigger", "0"], "--max-offsets-per-trigger"),
    (["--format", "parquet", "--storage-option", "a=b"], "--storage-option"),
    (["--delta-engine", "delta-spark"], "--delta-engine"),
])
def test_misuse_exits_2_naming_the_flag(argv: list[str], flag: str, spark: SparkSession,
                                        tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--brokers", "127.0.0.1:1", "--topics", "orders", "--table", str(tmp_path / "t"),
            "--checkpoint", str(tmp_path / "c")]
    assert ingest_to_table.main(base + argv) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_lag_is_latest_minus_end_per_queue() -> None:
    end = json.dumps({"orders": {"broker-a:0": 10, "broker-a:1": 5}})
    latest = json.dumps({"orders": {"broker-a:0": 12, "broker-a:1": 5, "broker-a:2": 3}})
    assert lag_messages(end, latest) == 5
    assert lag_messages(end, None) is None


class _FakeQuery:
    """A streaming query stand-in at the IO boundary: each wait advances a fake clock and may
    finish a batch (rows per wait from `script`; None: a batch with data is still running)."""

    def __init__(self, script: list[int | None], clock: list[float]) -> None:
        self.script, self.clock, self.recentProgress = script, clock, []
        self.status = {"isTriggerActive": False, "isDataAvailable": False}

    def awaitTermination(self, timeout_s: float) -> bool:
        self.clock[0] += timeout_s
        if self.script:
            rows = self.script.pop(0)
            running = rows is None
            self.status = {"isTriggerActive": running, "isDataAvailable": running}
            if running:
                return False
            self.recentProgress.append({"batchId": len(self.recentProgress), "numInputRows": rows,
                                        "durationMs": {"triggerExecution": 5}, "sources": []})
        return False


@pytest.mark.parametrize(("script", "idle_s", "timeout_s", "batches"), [
    ([0, 0, 5, 3, 0, 0, 0, 0, 7], 2.5, 100.0, 7),  # idle only counts after the first rows
    ([0] * 50, 2.0, 10.0, 10),  # no rows ever: the overall timeout ends it
    ([4] * 50, 2.0, 6.0, 6),  # busy: the overall timeout ends it
    ([5] + [None] * 12 + [4], 10.0, 100.0, 2),  # a 12 s batch is not idleness
])
def test_watch_stops_when_caught_up_or_timed_out(script: list[int | None], idle_s: float,
                                                 timeout_s: float, batches: int) -> None:
    clock = [0.0]
    query = _FakeQuery(list(script), clock)
    seen = watch(query, timeout_s=timeout_s, idle_timeout_s=idle_s, emit=lambda _: None,
                 poll_s=1.0, clock=lambda: clock[0])
    assert len(seen) == batches
    assert [b.rows for b in seen] == [rows for rows in script if rows is not None][:batches]

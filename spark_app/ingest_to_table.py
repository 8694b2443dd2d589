"""ingest_to_table: a streaming job from rocketha topics into a Delta (or Parquet) table.

    spark-submit -m spark_app.ingest_to_table ...      (or: python -m spark_app.ingest_to_table)
      --brokers 127.0.0.1:9876 --topics orders --table /data/orders --checkpoint /ckpt/orders
      [--format delta|parquet] [--delta-engine auto|delta-spark|deltalake]
      [--trigger available-now|once|processing:10s] [--starting-offsets earliest|latest|JSON]
      [--max-offsets-per-trigger N] [--tag-filter EXPR] [--group-id G]
      [--body-as binary|string] [--body-json-schema "order BIGINT, kind STRING"]
      [--partition-by col,...] [--storage-option k=v ...] [--timeout-s N] [--idle-timeout-s N]

Exactly once across restarts, on every path:
- `--format parquet`: Spark's file sink, exactly-once through its `_spark_metadata` log.
- `--format delta` with delta-spark's JARs on the classpath (`--delta-engine delta-spark`, or
  `auto` finds them): `format("delta")`, exactly-once through Delta's streaming sink.
- `--format delta` without the JARs (this machine: Maven is unreachable, so `auto` picks this):
  `foreachBatch` hands each micro-batch, as Arrow, to `table_sink.DeltaBatchCommitter`, which
  commits it with the Delta transaction identifier (app id from the checkpoint path, version =
  batch id), so a replayed batch is skipped. Both engines write the same table format and each
  reads the other's tables. The batch is collected on the driver: bound it with
  `--max-offsets-per-trigger` (default `DRIVER_BATCH_MESSAGES_DEFAULT` on this path).

A zombie driver (a second driver of the query, running the same batch concurrently) adds
nothing on the deltalake path: the commit is conditional on the app transaction version it
read, so the loser re-reads and skips. On Parquet the loser fails on `_spark_metadata/<n>`
(created without overwrite), so Spark readers see the batch once, but its data files stay in
the directory, and the create is not atomic on S3. See `table_sink`'s module docstring.

Prints one progress line per micro-batch (rows, lag from the source's latest offset, duration),
then one JSON summary line. Exits 2 with one line on misuse.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from spark_app import progress
from spark_app.pipeline_cli import (
    FILTER_PUSHDOWN_CONF,
    UsageError,
    add_source_arguments,
    key_value,
    parse_trigger,
    run_pipeline,
    source_options,
)
from spark_app.table_sink import DeltaBatchCommitter, app_id_for_checkpoint

__all__ = [
    "IngestPlan",
    "delta_spark_available",
    "main",
    "plan",
    "resolve_engine",
    "start_query",
    "transform",
]

DRIVER_BATCH_MESSAGES_DEFAULT = 500_000  # deltalake path: rows collected per micro-batch
_DELTA_SOURCE_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"


@dataclasses.dataclass(frozen=True, slots=True)
class IngestPlan:
    """Everything the job needs, validated; built from the command line by `plan`."""

    source_options: Mapping[str, str]
    table: str
    checkpoint: str
    table_format: str  # "delta" | "parquet"
    delta_engine: str  # "auto" | "delta-spark" | "deltalake"
    trigger: Mapping[str, object]
    body_as: str  # "binary" | "string"
    body_json_schema: str | None
    partition_by: tuple[str, ...]
    storage_options: Mapping[str, str]
    timeout_s: float | None
    query_name: str
    idle_timeout_s: float | None = None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ingest_to_table", description=__doc__.splitlines()[0])
    add_source_arguments(parser, streaming=True)
    parser.add_argument("--table", required=True, help="table path or URI (s3://... for Delta)")
    parser.add_argument("--checkpoint", required=True, help="streaming checkpoint location")
    parser.add_argument("--format", dest="table_format", choices=("delta", "parquet"),
                        default="delta")
    parser.add_argument("--delta-engine", choices=("auto", "delta-spark", "deltalake"),
                        default="auto")
    parser.add_argument("--trigger", default="processing:5s")
    parser.add_argument("--body-as", choices=("binary", "string"), default="binary")
    parser.add_argument("--body-json-schema",
                        help="DDL of JSON bodies; their fields become columns")
    parser.add_argument("--partition-by", default="", help="comma-separated columns")
    parser.add_argument("--storage-option", action="append", type=key_value, default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--timeout-s", type=float, default=0.0,
                        help="stop after this many seconds (0: run until the query ends)")
    parser.add_argument("--idle-timeout-s", type=float, default=0.0,
                        help="stop once caught up: no rows for this long after the first rows")
    parser.add_argument("--query-name", default="rocketha_ingest_to_table")
    return parser


def plan(argv: Sequence[str] | None) -> IngestPlan:
    """Parse and validate the command line (no Spark needed)."""
    args = _parser().parse_args(argv)
    options = source_options(args)
    for flag, value in (("--timeout-s", args.timeout_s),
                        ("--idle-timeout-s", args.idle_timeout_s)):
        if value < 0:
            raise UsageError(f"{flag}: must be >= 0, got {value}")
    if (args.table_format == "delta" and args.delta_engine != "delta-spark"
            and "maxOffsetsPerTrigger" not in options):
        options["maxOffsetsPerTrigger"] = str(DRIVER_BATCH_MESSAGES_DEFAULT)
    if args.table_format == "parquet" and args.storage_option:
        raise UsageError("--storage-option: only for --format delta (Spark's own file sink "
                         "takes Hadoop settings through --conf)")
    return IngestPlan(
        source_options=options, table=args.table, checkpoint=args.checkpoint,
        table_format=args.table_format, delta_engine=args.delta_engine,
        trigger=parse_trigger(args.trigger), body_as=args.body_as,
        body_json_schema=args.body_json_schema,
        partition_by=tuple(c.strip() for c in args.partition_by.split(",") if c.strip()),
        storage_options=dict(args.storage_option),
        timeout_s=args.timeout_s or None, query_name=args.query_name,
        idle_timeout_s=args.idle_timeout_s or None)


def transform(frame: DataFrame, ingest: IngestPlan) -> DataFrame:
    """The rocketha rows as the table stores them: body decoded as asked."""
    if ingest.body_json_schema:
        try:
            schema = StructType.fromDDL(ingest.body_json_schema)
        except Exception as exc:  # noqa: BLE001 - pyspark raises several parse error types
            raise UsageError(f"--body-json-schema: {exc}") from None
        decoded = F.from_json(F.col("body").cast("string"), schema)
        return frame.withColumn("_decoded", decoded).select(
            *[c for c in frame.columns if c != "body"], "_decoded.*")
    if ingest.body_as == "string":
        return frame.withColumn("body", F.col("body").cast("string"))
    return frame


def delta_spark_available(spark: SparkSession) -> bool:
    """True when delta-spark's JARs are on the driver's classpath."""
    try:
        loader = spark._jvm.java.lang.Thread.currentThread().getContextClassLoader()
        loader.loadClass(_DELTA_SOURCE_CLASS)
    except Exception:  # noqa: BLE001 - Py4JJavaError (ClassNotFoundException) or no JVM
        return False
    return True


def resolve_engine(spark: SparkSession, ingest: IngestPlan) -> str:
    """"parquet", "delta-spark" or "deltalake" (see the module docstring)."""
    if ingest.table_format == "parquet":
        return "parquet"
    if ingest.delta_engine == "auto":
        return "delta-spark" if delta_spark_available(spark) else "deltalake"
    if ingest.delta_engine == "delta-spark" and not delta_spark_available(spark):
        raise UsageError("--delta-engine delta-spark: delta-spark's JARs are not on the "
                         "classpath (pass them with --jars, or use --delta-engine deltalake)")
    return ingest.delta_engine


def start_query(frame: DataFrame, ingest: IngestPlan, engine: str) -> Any:
    """Start the streaming write of `frame` (already transformed) with `engine`."""
    writer = (frame.writeStream.queryName(ingest.query_name)
              .option("checkpointLocation", ingest.checkpoint).trigger(**ingest.trigger))
    if engine == "deltalake":
        committer = DeltaBatchCommitter(ingest.table, app_id_for_checkpoint(ingest.checkpoint),
                                        dict(ingest.storage_options) or None,
                                        ingest.partition_by)

        def commit_batch(batch: DataFrame, batch_id: int) -> None:
            committer.commit(batch.toArrow(), batch_id)

        return writer.foreachBatch(commit_batch).start()
    if ingest.partition_by:
        writer = writer.partitionBy(*ingest.partition_by)
    fmt = "delta" if engine == "delta-spark" else "parquet"
    return writer.format(fmt).option("path", ingest.table).start()


def _body(argv: Sequence[str] | None) -> int:
    ingest = plan(argv)
    spark = (SparkSession.builder.appName("rocketha-ingest_to_table")
             .config(FILTER_PUSHDOWN_CONF, "true").getOrCreate())
    engine = resolve_engine(spark, ingest)
    frame = transform(spark.readStream.format("rocketha").options(**ingest.source_options)
                      .load(), ingest)
    query = start_query(frame, ingest, engine)
    print(f"ingest_to_table: {engine} table {ingest.table}, checkpoint {ingest.checkpoint}",
          flush=True)
    try:
        batches = progress.watch(query, timeout_s=ingest.timeout_s,
                                 idle_timeout_s=ingest.idle_timeout_s,
                                 emit=lambda line: print(line, flush=True))
    finally:
        query.stop()
    summary = {"batches": len(batches), "rows": sum(b.rows for b in batches),
               "engine": engine, "table": ingest.table,
               "last_lag": batches[-1].lag_messages if batches else None}
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_pipeline("ingest_to_table", _body, argv)


if __name__ == "__main__":
    sys.exit(main())

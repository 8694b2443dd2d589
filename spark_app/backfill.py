"""backfill: replay a range of a topic (tiered ranges included) into a table, once.

    python -m spark_app.backfill --brokers 127.0.0.1:9876 --topics orders \
      --starting-offsets earliest --ending-offsets latest --table /data/orders_backfill \
      [--format delta|parquet] [--read-cold-from-tier] [--body-as string |
       --body-json-schema DDL] [--partition-by col] [--storage-option k=v ...]

A batch read of [startingOffsets, endingOffsets); the connector resolves `earliest`/`latest`
when it plans the job (reads never pass the confirm position). With `--read-cold-from-tier`,
ranges that live only in the tier are read by executors straight from object storage.

A backfill is identified by its table and its source options *as given*. Rerunning one that
completed adds nothing: on the Delta path the commit carries the transaction identifier
(app id = hash of table + options, version 0), the mechanism ingest_to_table uses per
micro-batch; a run that failed committed nothing (one atomic Delta commit), so its rerun
writes the range once. A rerun with `latest` therefore does not pick up newer messages: give
explicit `--ending-offsets` JSON (or a new range) for the next slice. The Delta path gathers
the range on the driver as Arrow (delta-rs commits from one process): size slices to the
driver's memory (`spark.driver.memory`, `spark.driver.maxResultSize`). `--format parquet` writes
with `mode("append")` and has no such guard (Spark's batch file writer has none): rerunning it
appends again, so the job refuses a non-empty target unless `--append-parquet` says that is
intended.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from spark_app.ingest_to_table import IngestPlan, transform
from spark_app.job_progress import JobProgress
from spark_app.pipeline_cli import (
    FILTER_PUSHDOWN_CONF,
    UsageError,
    add_source_arguments,
    key_value,
    run_pipeline,
    source_options,
)
from spark_app.table_sink import DeltaBatchCommitter

__all__ = ["backfill_app_id", "main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="backfill", description=__doc__.splitlines()[0])
    add_source_arguments(parser, streaming=False)
    parser.add_argument("--ending-offsets", default="latest",
                        help="latest | JSON per queue (exclusive)")
    parser.add_argument("--read-cold-from-tier", action="store_true")
    parser.add_argument("--table", required=True)
    parser.add_argument("--format", dest="table_format", choices=("delta", "parquet"),
                        default="delta")
    parser.add_argument("--body-as", choices=("binary", "string"), default="binary")
    parser.add_argument("--body-json-schema")
    parser.add_argument("--partition-by", default="")
    parser.add_argument("--storage-option", action="append", type=key_value, default=[],
                        metavar="KEY=VALUE")
    parser.add_argument("--append-parquet", action="store_true",
                        help="allow appending to a non-empty Parquet target")
    return parser


def backfill_app_id(table: str, options: dict[str, str]) -> str:
    """Delta txn app id of one backfill: the same table and range give the same id."""
    canonical = json.dumps({"table": table, "source": options}, sort_keys=True)
    return "rocketha-backfill-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _body(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    options = source_options(args)
    if args.read_cold_from_tier:
        options["readColdFromTier"] = "true"
    if args.table_format == "parquet" and args.storage_option:
        raise UsageError("--storage-option: only for --format delta")
    ending = args.ending_offsets.strip()
    if ending != "latest":
        try:
            json.loads(ending)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--ending-offsets: not latest or JSON ({exc})") from None
    options["endingOffsets"] = ending
    spark = (SparkSession.builder.appName("rocketha-backfill")
             .config(FILTER_PUSHDOWN_CONF, "true").getOrCreate())
    shape = IngestPlan(
        source_options=options, table=args.table, checkpoint="", table_format=args.table_format,
        delta_engine="deltalake", trigger={}, body_as=args.body_as,
        body_json_schema=args.body_json_schema,
        partition_by=tuple(c.strip() for c in args.partition_by.split(",") if c.strip()),
        storage_options=dict(args.storage_option), timeout_s=None, query_name="backfill")
    frame = transform(spark.read.format("rocketha").options(**options).load(), shape)
    if args.table_format == "parquet":
        target = Path(args.table)
        if "://" not in args.table and target.exists() and any(target.iterdir()) \
                and not args.append_parquet:
            raise UsageError(f"--table: {args.table} is not empty (a rerun would append the "
                             "range again); pass --append-parquet if that is intended")
        writer = frame.write.mode("append")
        if shape.partition_by:
            writer = writer.partitionBy(*shape.partition_by)
        with JobProgress(spark, "backfill"):  # a bar of tasks, on a terminal only
            writer.parquet(args.table)
        table_rows, skipped = spark.read.parquet(args.table).count(), False
    else:
        committer = DeltaBatchCommitter(args.table, backfill_app_id(args.table, options),
                                        shape.storage_options or None, shape.partition_by)
        with JobProgress(spark, "backfill"):  # reading the range is the long part
            gathered = frame.toArrow()
        skipped = committer.commit(gathered, 0).skipped
        table_rows = DeltaTable(args.table, storage_options=shape.storage_options or None
                                ).to_pyarrow_dataset().count_rows()
    print(json.dumps({"skipped": skipped, "table": args.table, "table_rows": table_rows},
                     sort_keys=True), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_pipeline("backfill", _body, argv)


if __name__ == "__main__":
    sys.exit(main())

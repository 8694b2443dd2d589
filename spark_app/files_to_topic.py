"""files_to_topic: JSON, CSV or Parquet files into a rocketha topic (batch or streaming).

    python -m spark_app.files_to_topic --brokers 127.0.0.1:9876 --topic orders \
      --input /data/orders/ --input-format json [--schema "order BIGINT, customer STRING, ..."] \
      [--key-column customer] [--tags-column kind | --tags paid] [--body-columns a,b,...] \
      [--streaming --checkpoint /ckpt/files --trigger available-now|processing:10s]

Each input row becomes one message: `body` is the row (or the `--body-columns`) as a JSON
object, `key` comes from `--key-column` (messages with one key go to one queue, in order),
`tags` from `--tags-column` or the constant `--tags`. Writes go through the connector's
exactly-once sink, so a retried task or a replayed micro-batch adds no duplicates, and a
non-PUT_OK status fails the job (Spark retries the task).

Batch mode reads the files once; `--streaming` watches the directory (Spark's file source
needs `--schema` for JSON and CSV there) and keeps going until `--timeout-s` or, with
`--trigger available-now`, until the files present at start are written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_app import progress
from spark_app.job_progress import JobProgress
from spark_app.pipeline_cli import (
    UsageError,
    add_credentials_argument,
    credential_options,
    key_value,
    parse_trigger,
    run_pipeline,
    where_options,
)

__all__ = ["main", "to_messages"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="files_to_topic", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--brokers")
    where.add_argument("--controller")
    parser.add_argument("--client-config", metavar="FILE",
                        help="client.properties: addresses and TLS settings (clientConfig)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--input", required=True, help="a file or a directory")
    parser.add_argument("--input-format", choices=("json", "csv", "parquet"), required=True)
    parser.add_argument("--schema", help="DDL of the input rows (required to stream JSON/CSV)")
    parser.add_argument("--key-column")
    tags = parser.add_mutually_exclusive_group()
    tags.add_argument("--tags-column")
    tags.add_argument("--tags", help="one tag for every message")
    parser.add_argument("--body-columns", help="comma-separated; default: every column")
    parser.add_argument("--streaming", action="store_true")
    parser.add_argument("--checkpoint", help="required with --streaming")
    parser.add_argument("--trigger", default="available-now")
    parser.add_argument("--timeout-s", type=float, default=0.0)
    parser.add_argument("--option", action="append", type=key_value, default=[],
                        metavar="KEY=VALUE", help="any other rocketha sink option")
    add_credentials_argument(parser)
    return parser


def to_messages(rows: DataFrame, *, key_column: str | None = None,
                tags_column: str | None = None, tags: str | None = None,
                body_columns: Sequence[str] = ()) -> DataFrame:
    """Input rows -> the sink's columns (`body`, and `key`/`tags` when asked).

    Raises UsageError naming the flag when a named column does not exist."""
    available = set(rows.columns)
    for flag, name in (("--key-column", key_column), ("--tags-column", tags_column)):
        if name is not None and name not in available:
            raise UsageError(f"{flag}: no column {name!r} (columns: {sorted(available)})")
    missing = [name for name in body_columns if name not in available]
    if missing:
        raise UsageError(f"--body-columns: no column(s) {missing} (columns: {sorted(available)})")
    body_fields = list(body_columns) or rows.columns
    columns: list[Column] = [F.to_json(F.struct(*body_fields)).alias("body")]
    if key_column is not None:
        columns.append(F.col(key_column).cast("string").alias("key"))
    if tags_column is not None:
        columns.append(F.col(tags_column).cast("string").alias("tags"))
    elif tags is not None:
        columns.append(F.lit(tags).alias("tags"))
    return rows.select(*columns)


def _sink_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"topic": args.topic}
    options.update(where_options(args))
    options.update(credential_options(args))
    options.update(dict(args.option))
    return options


def _read(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    if args.streaming:
        if not args.checkpoint:
            raise UsageError("--checkpoint: required with --streaming")
        if args.schema is None and args.input_format != "parquet":
            raise UsageError("--schema: required to stream JSON or CSV files")
        reader = spark.readStream
    elif args.checkpoint:
        raise UsageError("--checkpoint: only with --streaming")
    else:
        reader = spark.read
    if args.schema:
        reader = reader.schema(args.schema)
    if args.input_format == "csv":
        reader = reader.option("header", "true")
        if args.schema is None:
            reader = reader.option("inferSchema", "true")
    return reader.format(args.input_format).load(args.input)


def _body(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    trigger = parse_trigger(args.trigger)
    if args.timeout_s < 0:
        raise UsageError(f"--timeout-s: must be >= 0, got {args.timeout_s}")
    spark = SparkSession.builder.appName("rocketha-files_to_topic").getOrCreate()
    body_columns = [c.strip() for c in (args.body_columns or "").split(",") if c.strip()]
    messages = to_messages(_read(spark, args), key_column=args.key_column,
                           tags_column=args.tags_column, tags=args.tags,
                           body_columns=body_columns)
    options = _sink_options(args)
    if not args.streaming:
        with JobProgress(spark, "files_to_topic"):  # a bar of tasks, on a terminal only
            rows = messages.count()
            messages.write.format("rocketha").options(**options).mode("append").save()
        print(json.dumps({"rows": rows, "topic": args.topic, "mode": "batch"}), flush=True)
        return 0
    query = (messages.writeStream.format("rocketha").options(**options)
             .option("checkpointLocation", args.checkpoint).trigger(**trigger).start())
    try:
        batches = progress.watch(query, timeout_s=args.timeout_s or None,
                                 emit=lambda line: print(line, flush=True))
    finally:
        query.stop()
    print(json.dumps({"rows": sum(b.rows for b in batches), "topic": args.topic,
                      "mode": "streaming", "batches": len(batches)}), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_pipeline("files_to_topic", _body, argv)


if __name__ == "__main__":
    sys.exit(main())

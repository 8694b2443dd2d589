"""The spark-submit job of tests/integration/test_spark_standalone.py (one driver, so one set of
executor JVMs per test session): first the ingest_to_table pipeline as users run it
(`spark_app.ingest_to_table.main`, its own arguments after `--ingest`), then topic -> topic through
`format("rocketha")` on both sides (a streaming read and an exactly-once streaming write), run
twice on one checkpoint with a crash between write and commit in between.

    spark-submit standalone_copy_job.py CONTROLLER SOURCE TARGET CHECKPOINT --ingest ARGS...

1. the copy query (Trigger.AvailableNow) from SOURCE's earliest offsets to TARGET;
2. the last entry of the checkpoint's commit log removed (Spark wrote the batch and crashed
   before recording it), and the query started again: Spark replays that batch, the sink's
   idempotent producers send it again, and the brokers must drop every row of it.
Prints one line: SUMMARY {"batches", "replayed_batch", "target_rows", "target_distinct"}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_app import ingest_to_table


def copy(spark: SparkSession, controller: str, source: str, target: str,
         checkpoint: str) -> None:
    stream = (spark.readStream.format("rocketha").option("controller", controller)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("fetchMaxMessages", "500").option("maxOffsetsPerTrigger", "2000")
              .load().select("body", "key"))
    query = (stream.writeStream.format("rocketha").option("controller", controller)
             .option("topic", target).option("writeBatchRows", "200")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def main(argv: list[str]) -> int:
    split = argv.index("--ingest")
    controller, source, target, checkpoint = argv[:split]
    spark = SparkSession.builder.appName("rocketha-standalone-jobs").getOrCreate()
    ingest_rc = ingest_to_table.main(argv[split + 1:])  # its JSON summary line is printed
    if ingest_rc != 0:
        return ingest_rc
    copy(spark, controller, source, target, checkpoint)
    commits = sorted((Path(checkpoint) / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    copy(spark, controller, source, target, checkpoint)
    rows = (spark.read.format("rocketha").option("controller", controller)
            .option("subscribe", target).load()
            .select(F.col("body").cast("string").alias("body")))
    summary = {"batches": len(commits), "replayed_batch": int(last.name),
               "target_rows": rows.count(), "target_distinct": rows.distinct().count()}
    print("SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

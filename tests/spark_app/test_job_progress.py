"""The task bar of the pipelines' batch actions (spark_app/job_progress.py): on a terminal it
counts the action's tasks to 100 %; otherwise it draws nothing and leaves no job group behind.

Method: a real local SparkSession (the session fixture) runs a two-stage aggregation inside
JobProgress; the terminal is a stream that says it is a TTY, the pipe one that says it is not.
"""

from __future__ import annotations

import io
import re

import pytest
from pyspark.sql import SparkSession

from spark_app.job_progress import JobProgress

pytestmark = pytest.mark.spark


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _aggregate(spark: SparkSession) -> int:
    return spark.range(0, 100_000, numPartitions=6).selectExpr("sum(id) AS s").collect()[0].s


def test_a_batch_action_draws_its_tasks_on_a_terminal(spark: SparkSession) -> None:
    terminal = _Terminal()
    with JobProgress(spark, "backfill", stream=terminal, interval_s=0.05):
        assert _aggregate(spark) == sum(range(100_000))
    last = terminal.getvalue().rstrip("\n").split("\r")[-1]
    found = re.match(r"backfill \[#+\] (\d+)/(\d+) 100% ", last)
    assert found is not None, terminal.getvalue()
    assert found.group(1) == found.group(2) and int(found.group(2)) >= 6  # every task counted
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


def test_nothing_is_drawn_nor_grouped_off_a_terminal(spark: SparkSession) -> None:
    pipe = io.StringIO()
    with JobProgress(spark, "backfill", stream=pipe, interval_s=0.05):
        assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None
        _aggregate(spark)
    assert pipe.getvalue() == ""

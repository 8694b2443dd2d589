"""files_to_topic shapes input rows into messages and refuses misuse before writing.

Goal: bodies are the rows as JSON (all columns or the chosen ones), key and tags come from the
named columns or a constant, unknown columns and missing streaming settings name the flag.
Method: a real local SparkSession over small JSON/CSV files in tmp_path (the write itself is the
connector sink's, tested against a broker with the connector).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_app import files_to_topic
from spark_app.pipeline_cli import UsageError

pytestmark = pytest.mark.spark


def _orders(spark: SparkSession):  # type: ignore[no-untyped-def]
    return spark.createDataFrame([(1, "alice", "paid", 120), (2, "bob", "created", 80)],
                                 "order BIGINT, customer STRING, kind STRING, cents INT")


def test_rows_become_json_bodies_with_key_and_tags(spark: SparkSession) -> None:
    rows = files_to_topic.to_messages(_orders(spark), key_column="customer",
                                      tags_column="kind").collect()
    assert [json.loads(r.body) for r in rows] == [
        {"order": 1, "customer": "alice", "kind": "paid", "cents": 120},
        {"order": 2, "customer": "bob", "kind": "created", "cents": 80}]
    assert [(r.key, r.tags) for r in rows] == [("alice", "paid"), ("bob", "created")]


def test_chosen_body_columns_and_constant_tag(spark: SparkSession) -> None:
    frame = files_to_topic.to_messages(_orders(spark), tags="import",
                                       body_columns=["order", "cents"])
    assert frame.columns == ["body", "tags"]
    assert [json.loads(r.body) for r in frame.collect()] == [{"order": 1, "cents": 120},
                                                             {"order": 2, "cents": 80}]
    assert {r.tags for r in frame.collect()} == {"import"}


@pytest.mark.parametrize(("kwargs", "flag"), [
    ({"key_column": "nope"}, "--key-column"),
    ({"tags_column": "nope"}, "--tags-column"),
    ({"body_columns": ["order", "nope"]}, "--body-columns"),
])
def test_unknown_columns_name_the_flag(spark: SparkSession, kwargs: dict[str, object],
                                       flag: str) -> None:
    with pytest.raises(UsageError, match=flag):
        files_to_topic.to_messages(_orders(spark), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("extra", "flag"), [
    (["--streaming"], "--checkpoint"),
    (["--streaming", "--checkpoint", "ckpt"], "--schema"),
    (["--checkpoint", "ckpt"], "--checkpoint"),
    (["--key-column", "missing"], "--key-column"),
    (["--trigger", "whenever"], "--trigger"),
])
def test_misuse_exits_2(spark: SparkSession, tmp_path: Path, extra: list[str], flag: str,
                        capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.csv"
    source.write_text("order,customer\n1,alice\n")
    argv = ["--brokers", "127.0.0.1:1", "--topic", "orders", "--input", str(source),
            "--input-format", "csv", *extra]
    assert files_to_topic.main(argv) == 2
    assert flag in capsys.readouterr().err

"""The pipelines against a real broker: files -> topic -> table, backfill, restarts.

Goal: files_to_topic puts every input row into the topic once (a rerun of the same files adds
rows again only through a new job, so the test runs it once); ingest_to_table streams the
topic into a Delta table through the deltalake engine and, restarted from its checkpoint after
more messages, ends with every message exactly once; backfill writes a range once and a rerun
is skipped. Method: a real broker process (module fixture), the real `rocketha` source and sink,
the session SparkSession, Delta read back with deltalake.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from connector import Admin, ClientConfig, Producer
from spark_app import backfill, files_to_topic, ingest_to_table
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def _produce(broker: BrokerProcess, topic: str, first: int, count: int) -> None:
    rows = [{"body": json.dumps({"order": n, "kind": "paid" if n % 3 else "created"}).encode(),
             "key": f"c{n % 11}", "tags": "paid" if n % 3 else "created"}
            for n in range(first, first + count)]
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        assert all(result.ok for result in producer.send_batch(topic, rows))


def _orders(table: Path) -> list[int]:
    return sorted(DeltaTable(str(table)).to_pyarrow_table().column("order").to_pylist())


def test_ingest_to_table_exactly_once_across_restarts(spark, broker: BrokerProcess,
                                                      tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("ingest_orders", queues=3)
    _produce(broker, "ingest_orders", 0, 300)
    table, ckpt = tmp_path / "orders", tmp_path / "ckpt"
    argv = ["--brokers", broker.endpoint, "--topics", "ingest_orders", "--table", str(table),
            "--checkpoint", str(ckpt), "--trigger", "available-now",
            "--max-offsets-per-trigger", "120", "--body-json-schema", "order BIGINT, kind STRING"]
    assert ingest_to_table.main(argv) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["rows"] == 300 and summary["engine"] == "deltalake"
    assert summary["batches"] >= 3  # 120 per trigger
    assert "lag=" in out
    assert _orders(table) == list(range(300))

    _produce(broker, "ingest_orders", 300, 100)
    assert ingest_to_table.main(argv) == 0
    assert _orders(table) == list(range(400))
    tags = DeltaTable(str(table)).to_pyarrow_table().column("tags").to_pylist()
    assert set(tags) == {"paid", "created"}


def test_files_to_topic_then_backfill_once(spark, broker: BrokerProcess, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("file_orders", queues=2)
    source = tmp_path / "orders.json"
    source.write_text("".join(json.dumps({"order": n, "customer": f"c{n % 5}",
                                          "kind": "paid" if n % 2 else "created"}) + "\n"
                              for n in range(250)))
    assert files_to_topic.main([
        "--brokers", broker.endpoint, "--topic", "file_orders", "--input", str(source),
        "--input-format", "json", "--key-column", "customer", "--tags-column", "kind"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"] == 250

    table = tmp_path / "backfilled"
    argv = ["--brokers", broker.endpoint, "--topics", "file_orders", "--table", str(table),
            "--body-json-schema", "order BIGINT, customer STRING, kind STRING"]
    assert backfill.main(argv) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (first["table_rows"], first["skipped"]) == (250, False)
    assert _orders(table) == list(range(250))
    frame = DeltaTable(str(table)).to_pyarrow_table()
    by_order = dict(zip(frame.column("order").to_pylist(), frame.column("key").to_pylist(),
                        strict=True))
    assert all(by_order[n] == f"c{n % 5}" for n in range(250))

    assert backfill.main(argv) == 0  # the same backfill again: skipped, nothing added
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (again["table_rows"], again["skipped"]) == (250, True)

"""A topic table read without Spark: pyarrow's dataset of the snapshot, and DuckDB over it.

Goal: the table a pass committed answers the same per-queue aggregation in DuckDB as the store
holds (count and body bytes per queue), with a filter on two columns pushed into the scan.
Method: a real store and a real Delta table in a tmp dir (as tests/ha/test_topic_table.py);
DuckDB reads the pyarrow dataset of the snapshot (its `delta` extension would be downloaded at
run time, which this machine cannot).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
from deltalake import DeltaTable

from storage_engine import MessageStore
from tests.ha.test_topic_table import QUEUES, TOPIC, put, store, writer  # noqa: F401 - fixture


def test_duckdb_reads_the_table_through_its_pyarrow_dataset(store: MessageStore,  # noqa: F811
                                                            tmp_path: Path) -> None:
    uri = str(tmp_path / "tables" / TOPIC)
    put(store, 90)
    assert writer(store, uri).run_pass(1, range(QUEUES)).rows == 90
    dataset = DeltaTable(uri).to_pyarrow_dataset()
    connection = duckdb.connect()
    connection.register("orders", dataset)
    per_queue = connection.sql(
        "SELECT queueId, count(*), sum(octet_length(body)) FROM orders GROUP BY queueId "
        "ORDER BY queueId").fetchall()
    expected = [(q, 30, sum(len(b"m%d" % n) for n in range(q, 90, QUEUES)))
                for q in range(QUEUES)]
    assert per_queue == expected
    picked = connection.sql("SELECT queueOffset FROM orders WHERE queueId = 1 AND "
                            "queueOffset >= 25 ORDER BY queueOffset").fetchall()
    assert picked == [(25,), (26,), (27,), (28,), (29,)]

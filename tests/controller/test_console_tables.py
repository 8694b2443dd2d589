"""The console's topic-table rows from a master's `broker info` (controller/console/tables.py).

Goal: each table topic's lag, last commit and last error reach the page as the broker reports
them, an error record becomes one readable line, and a replica set without a master (or whose
master has no table topic) shows no row rather than failing the gathering.
"""

from __future__ import annotations

from controller.console.tables import table_rows


def test_rows_carry_lag_last_commit_and_the_last_error() -> None:
    info = {"topic_tables": {"role": "master", "topics": {
        "orders": {"uri": "s3://tier/tables/orders", "commits": 7, "rows": 700,
                   "last_commit_ms": 1_700_000_000_000, "last_version": 6,
                   "failures_in_a_row": 2, "fenced_epoch": None,
                   "last_error": {"kind": "OSError", "message": "bucket unreachable",
                                  "at_ms": 1_700_000_001_000},
                   "maintenance_error": None, "lag_messages": 40, "lag_seconds": 3.5},
        "audit": {"uri": "file:///t/tables/audit", "commits": 1, "rows": 3,
                  "last_commit_ms": 5, "last_version": 0, "failures_in_a_row": 0,
                  "last_error": None,
                  "maintenance_error": {"kind": "ValueError", "message": "bad"},
                  "lag_messages": 0, "lag_seconds": 0.0}}}}
    rows = table_rows("broker-a", info)
    assert [row["topic"] for row in rows] == ["audit", "orders"]  # sorted: stable on the page
    audit, orders = rows
    assert orders["replica_set"] == "broker-a"
    assert (orders["lag_messages"], orders["lag_seconds"]) == (40, 3.5)
    assert (orders["last_commit_ms"], orders["last_version"]) == (1_700_000_000_000, 6)
    assert orders["last_error"] == "OSError: bucket unreachable"
    assert orders["last_error_ms"] == 1_700_000_001_000 and orders["failures_in_a_row"] == 2
    assert audit["last_error"] is None and audit["maintenance_error"] == "ValueError: bad"


def test_no_master_or_no_table_topic_gives_no_row() -> None:
    assert table_rows("broker-a", None) == []
    assert table_rows("broker-a", {"role": "MASTER"}) == []  # a broker without the section
    assert table_rows("broker-a", {"topic_tables": {"topics": {}}}) == []

"""The console's rows for topic tables: each table topic's lag, last commit and last error.

The data is the master's `broker info` (its `topic_tables` section, ha/broker/topic_tables.py):
only the master materializes a table and only it knows how far the table is behind its
confirm position, so a slave's view of the same topic is not shown. Kept apart from app.py so
the gathering there stays one call per broker: this reads the answer it already has.
"""

from __future__ import annotations

from typing import Any

__all__ = ["table_rows"]


def table_rows(replica_set: str, master_info: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One row per table topic this replica set's master materializes (none when no master
    answered, or it has no table topic)."""
    section = (master_info or {}).get("topic_tables") or {}
    rows = []
    for topic, stats in sorted((section.get("topics") or {}).items()):
        rows.append({
            "topic": topic, "replica_set": replica_set, "uri": stats.get("uri"),
            "lag_messages": stats.get("lag_messages"), "lag_seconds": stats.get("lag_seconds"),
            "commits": stats.get("commits"), "rows": stats.get("rows"),
            "last_commit_ms": stats.get("last_commit_ms"),
            "last_version": stats.get("last_version"),
            "failures_in_a_row": stats.get("failures_in_a_row"),
            "fenced_epoch": stats.get("fenced_epoch"),
            "last_error": _error_line(stats.get("last_error")),
            "last_error_ms": (stats.get("last_error") or {}).get("at_ms"),
            "maintenance_error": _error_line(stats.get("maintenance_error")),
        })
    return rows


def _error_line(error: dict[str, Any] | None) -> str | None:
    """`kind: message` of a pass's or an upkeep's error record, None when there is none. The
    last pass error stays after later passes succeed (it says what went wrong last); the
    failures-in-a-row count says whether it still does."""
    if not error:
        return None
    return f"{error.get('kind', 'Error')}: {error.get('message', '')}"

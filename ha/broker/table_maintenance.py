"""Topic tables' upkeep: the table's own retention, compaction, vacuum (master only).

Commits every topicTableIntervalMs make one small Parquet file per day each time (17,280 a day
at 5 s), and every commit leaves the previous files of a compaction or deletion on the store.
Every topicTableMaintenanceIntervalMs, after a pass, the master of a table topic runs, in this
order (so compaction never rewrites days that retention is about to drop):

    retention  topicTableRetentionHours > 0: delete the storeDate days whose every row is
               older than it (`storeDate < the cutoff's UTC day`: a partition predicate, so
               whole files are removed, none rewritten); a day is kept up to one day longer
               than the retention, never less
    compact    pack files smaller than topicTableTargetFileBytes into files of about that
               size (delta-rs OPTIMIZE, one task: the broker shares its cores with puts)
    vacuum     delete data files no version newer than topicTableVacuumHours references
               (compacted away, deleted, or written by a commit that crashed before its log
               entry: a full vacuum, which lists the table's files, as only it finds those);
               snapshots younger than that stay readable

None of these carries an app transaction, and a Delta snapshot keeps the newest version of
every app id whatever later commits do, so the per-queue ends and the fence stay as the last
materializing commit left them. They commit with delta-rs's own conflict checks (a
compaction and an append of new files do not conflict); an append that loses the log
version to them fails whole and plans again (ha/broker/topic_tables.py counts it as a lost
race). Errors are the caller's to count and retry next interval.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from deltalake import CommitProperties, DeltaTable, WriterProperties

from ha.broker.topic_table import PARTITION_COLUMN, ZSTD_LEVEL

__all__ = ["MaintenanceResult", "MaintenanceSettings", "retention_cutoff_day",
           "run_maintenance"]

MS_PER_HOUR = 3_600_000
COMPACT_TASKS = 1  # one file rewritten at a time: the broker's cores serve puts first


@dataclasses.dataclass(frozen=True, slots=True)
class MaintenanceSettings:
    target_file_bytes: int  # topicTableTargetFileBytes
    vacuum_hours: int  # topicTableVacuumHours
    retention_hours: int  # topicTableRetentionHours (0: keep every row)


@dataclasses.dataclass(frozen=True, slots=True)
class MaintenanceResult:
    rows_deleted: int = 0  # by the table's retention
    files_compacted: int = 0  # small files packed into ...
    files_written: int = 0  # ... these
    files_vacuumed: int = 0
    version: int | None = None  # the table's version afterwards

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def retention_cutoff_day(now_ms: int, retention_hours: int) -> datetime.date | None:
    """The first storeDate day to keep: every row of the days before it is older than the
    retention (a day ends at the next midnight UTC). None: retention is off."""
    if retention_hours <= 0:
        return None
    cutoff_ms = now_ms - retention_hours * MS_PER_HOUR
    return datetime.datetime.fromtimestamp(cutoff_ms / 1000, datetime.UTC).date()


def run_maintenance(uri: str, storage_options: Mapping[str, str] | None,
                    settings: MaintenanceSettings, now_ms: int) -> MaintenanceResult | None:
    """Retention, compaction, vacuum of one table (see the module doc); None: no table."""
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(uri, storage_options=dict(storage_options) if storage_options
                           else None)
    except TableNotFoundError:
        return None
    properties = CommitProperties(custom_metadata={"rocketha.maintenance": "true"})
    rows_deleted = 0
    first_day = retention_cutoff_day(now_ms, settings.retention_hours)
    if first_day is not None:
        metrics = table.delete(f"{PARTITION_COLUMN} < '{first_day.isoformat()}'",
                               commit_properties=properties)
        rows_deleted = int(metrics.get("num_deleted_rows") or 0)
    compacted = table.optimize.compact(
        target_size=settings.target_file_bytes, max_concurrent_tasks=COMPACT_TASKS,
        writer_properties=WriterProperties(compression="ZSTD", compression_level=ZSTD_LEVEL),
        commit_properties=properties)
    vacuumed = table.vacuum(retention_hours=settings.vacuum_hours, dry_run=False,
                            enforce_retention_duration=False, full=True,
                            commit_properties=properties)
    return MaintenanceResult(rows_deleted, int(compacted.get("numFilesRemoved", 0)),
                             int(compacted.get("numFilesAdded", 0)), len(vacuumed),
                             table.version())

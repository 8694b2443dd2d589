"""Tests only: SIGKILL between a table commit's data files and its Delta log entry.

A commit writes its Parquet files first and `_delta_log/<v+1>.json` last (ha/broker/
topic_table.py); a broker killed between the two leaves data files that no log version
lists. delta-rs does both in one call, with no point between them to stop at, so this hook
makes that state itself: when the environment names a trigger file (CRASH_TRIGGER_ENV) and
the file exists at a commit to a local (file://) table, the broker removes the trigger (one
crash per trigger: the next master must not crash too), writes the commit's rows as Parquet
data files where delta-rs writes them (`<table>/storeDate=<day>/part-...zstd.parquet`), and
SIGKILLs itself before the log entry. Nothing sets the variable outside tests.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["CRASH_TRIGGER_ENV", "crash_after_data_files_if_asked"]

CRASH_TRIGGER_ENV = "ROCKETHA_TEST_TABLE_CRASH_TRIGGER"


def crash_after_data_files_if_asked(uri: str, rows: pa.Table, partition_column: str,
                                    zstd_level: int) -> None:
    """The hook (module doc): returns at once unless a test armed it."""
    trigger = os.environ.get(CRASH_TRIGGER_ENV)
    if not trigger or "://" in uri or rows.num_rows == 0:
        return
    try:
        os.unlink(trigger)
    except FileNotFoundError:
        return
    for day in pc.unique(rows.column(partition_column)).to_pylist():
        part = rows.filter(pc.equal(rows.column(partition_column), day))
        directory = Path(uri) / f"{partition_column}={day.isoformat()}"
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(part.drop_columns([partition_column]),
                       directory / f"part-00001-{uuid.uuid4()}-c000.zstd.parquet",
                       compression="zstd", compression_level=zstd_level)
    os.kill(os.getpid(), signal.SIGKILL)

"""Exactly-once micro-batch commits into a Delta table without delta-spark's JARs.

delta-spark needs its JARs from Maven, which these machines cannot reach. The `deltalake`
package (delta-rs) writes the same table format from Python. A streaming query's
`foreachBatch(df, batch_id)` may run a batch id twice (a crash after the table commit but
before Spark's own commit log entry, then a restart from the checkpoint), so each commit carries
a Delta *application transaction* `(app_id, version=batch_id)` in the same atomic commit as the
data. Before writing, the committer reads the table's last version for `app_id`: when it is at
or past `batch_id`, the batch is already in the table and is skipped. This is the protocol
delta-spark implements with its `txnAppId` / `txnVersion` writer options, so a table written here
is readable (and continuable) by delta-spark and the other way round.

`app_id` must be stable across restarts of one query and distinct between queries writing the
same table: the pipelines derive it from the checkpoint location.

Parquet (`--format parquet`) needs none of this: Spark's own file sink is exactly-once through
its `_spark_metadata` log.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

__all__ = ["BatchCommit", "DeltaBatchCommitter", "app_id_for_checkpoint"]

logger = logging.getLogger(__name__)

COMMIT_RETRIES_MAX = 5  # delta-rs optimistic-concurrency retries of one commit


def app_id_for_checkpoint(checkpoint_location: str, *, prefix: str = "rocketha") -> str:
    """A stable Delta application id for the query that owns `checkpoint_location`."""
    location = checkpoint_location
    if "://" not in location:
        location = str(Path(location).resolve())
    digest = hashlib.sha256(location.encode()).hexdigest()[:16]
    return f"{prefix}-{digest}"


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCommit:
    """What one `commit` call did."""

    batch_id: int
    rows: int
    skipped: bool  # True: the table already held this batch (a replay); nothing was written
    table_version: int


@dataclasses.dataclass(frozen=True, slots=True)
class DeltaBatchCommitter:
    """Appends each micro-batch once. Picklable (plain values only)."""

    table_uri: str
    app_id: str
    storage_options: Mapping[str, str] | None = None
    partition_by: tuple[str, ...] = ()

    def committed_version(self) -> int:
        """The last batch id committed by `app_id`, or -1 (no table, or nothing yet)."""
        table = self._table()
        if table is None:
            return -1
        version = table.transaction_version(self.app_id)
        return -1 if version is None else int(version)

    def commit(self, data: pa.Table, batch_id: int) -> BatchCommit:
        """Append `data` as batch `batch_id` unless the table already has that batch.

        Raises ValueError when `batch_id` is negative (Spark's ids start at 0)."""
        if batch_id < 0:
            raise ValueError(f"batch_id must be >= 0, got {batch_id}")
        done = self.committed_version()
        if done >= batch_id:
            logger.info("batch %d already in %s (app %s at %d): skipped", batch_id,
                        self.table_uri, self.app_id, done)
            return BatchCommit(batch_id, 0, True, self._version())
        write_deltalake(
            self.table_uri, data, mode="append",
            partition_by=list(self.partition_by) or None,
            storage_options=dict(self.storage_options) if self.storage_options else None,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(self.app_id, batch_id)],
                max_commit_retries=COMMIT_RETRIES_MAX),
        )
        return BatchCommit(batch_id, data.num_rows, False, self._version())

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.table_uri, storage_options=dict(self.storage_options)
                              if self.storage_options else None)
        except TableNotFoundError:
            return None

    def _version(self) -> int:
        table = self._table()
        return -1 if table is None else table.version()

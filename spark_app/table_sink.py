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

Conditional commit (two writers of one query: a zombie driver and its replacement)
---------------------------------------------------------------------------------
The check and the commit must be made on one snapshot. delta-rs checks a commit for conflicts
only against commits made after the snapshot its write starts from, and `write_deltalake(uri)`
loads the table afresh: a check on one snapshot followed by that call lets a commit of the same
batch land between the check and the load, where nothing conflicts with it, and the batch is
appended twice (measured with spawned writers racing batch 5 of one app at batch 4: 19 of 500
rounds with 2 writers, 48 of 100 with 4; the losers that did conflict raised CommitFailedError
instead of skipping). So every attempt here reads and commits on one snapshot:

    attempt (at most COMMIT_ATTEMPTS_MAX):
      load snapshot S (version v)      -> S.transaction_version(app_id) >= batch_id: skipped
      write data files, commit on S with max_commit_retries=0, i.e. put-if-absent of
      _delta_log/<v+1>.json            -> written: committed
      CommitFailedError (v+1 exists)   -> next attempt (re-read; skipped if the winner was
                                          another writer of this batch)

With zero retries delta-rs does not rebase: measured on deltalake 1.6.6, a commit on a stale
snapshot fails with CommitFailedError whatever the concurrent commit was (this app, another
app, a plain append). With retries > 0 it rebases over other apps' commits and fails on a
concurrent commit of the same app id through its conflict checker; we do not depend on that
check. The snapshot is also the table object handed to `write_deltalake`, so the commit is
made at v+1 and not at the version current when the write starts. A table that does not exist
yet is created with `mode="error"`: a concurrent creator makes it fail (CommitFailedError, or
"a table already exists"), never append. The guarantee is that of the log store's atomic
put-if-absent: local and HDFS-like file systems; on S3, delta-rs's locking provider (DynamoDB)
or conditional put, never `AWS_S3_ALLOW_UNSAFE_RENAME=true`. A lost attempt leaves its data
files unreferenced (`vacuum` removes them), and the next attempt writes them again.

Parquet (`--format parquet`) needs none of this: Spark's own file sink is exactly-once through
its `_spark_metadata` log, and that log is also what stops a zombie driver. Batch n is
committed by creating `_spark_metadata/<n>` without overwrite (temp file, then rename); a
second writer of n finds it and fails ("Race while writing batch n", or
ConcurrentModificationException from the rename), and a batch at or below the log's latest is
skipped. The loser's data files stay in the directory, unlisted: readers that go through the
log (Spark's `read.parquet(dir)`) see each batch once, readers that list the directory
(pyarrow, DuckDB) may not. The rename is atomic on HDFS; Hadoop's local file system checks
then renames (a narrow window), and S3 has no atomic rename, so on object stores only the
Delta path holds against a zombie.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

__all__ = [
    "BatchCommit",
    "CommitAttemptsExhaustedError",
    "DeltaBatchCommitter",
    "app_id_for_checkpoint",
]

logger = logging.getLogger(__name__)

# Read-then-commit attempts of one batch. Each lost attempt means another commit landed on the
# table in between (for this app id that ends in a skip on the next read), so the limit bounds
# contention from other writers of the table, not the zombie case.
COMMIT_ATTEMPTS_MAX = 10
COMMIT_RETRIES_DELTA_RS = 0  # delta-rs must not rebase a commit: see the module docstring


class CommitAttemptsExhaustedError(Exception):
    """Every attempt to commit one batch lost to a concurrent commit.

    The batch was not in the table at the last read. Retriable: a rerun (Spark replays the
    batch on restart) re-reads and appends it, or skips it if it got there meanwhile."""

    def __init__(self, table_uri: str, app_id: str, batch_id: int, attempts_count: int) -> None:
        super().__init__(f"{table_uri}: batch {batch_id} of app {app_id} lost "
                         f"{attempts_count} commit attempts to concurrent commits")
        self.table_uri = table_uri
        self.app_id = app_id
        self.batch_id = batch_id
        self.attempts_count = attempts_count


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
    table_version: int  # our commit's version, or (skipped) that of the snapshot that had it


@dataclasses.dataclass(frozen=True, slots=True)
class DeltaBatchCommitter:
    """Appends each micro-batch once. Picklable (plain values only)."""

    table_uri: str
    app_id: str
    storage_options: Mapping[str, str] | None = None
    partition_by: tuple[str, ...] = ()

    def committed_version(self) -> int:
        """The last batch id committed by `app_id`, or -1 (no table, or nothing yet)."""
        return _app_version(self._table(), self.app_id)

    def commit(self, data: pa.Table, batch_id: int) -> BatchCommit:
        """Append `data` as batch `batch_id` unless the table already has that batch.

        Safe against concurrent writers of the same `(app_id, batch_id)`: one appends, the
        others return `skipped`, because a commit only lands on the snapshot it was checked
        against (see the module docstring).

        Args:
            data: the batch's rows.
            batch_id: Spark's micro-batch id (>= 0); the app's recorded version after the commit.

        Returns:
            What was done: appended, or skipped because the table already had the batch.

        Raises:
            ValueError: `batch_id` is negative (Spark's ids start at 0).
            CommitAttemptsExhaustedError: COMMIT_ATTEMPTS_MAX attempts lost to concurrent
                commits (chained to the last CommitFailedError).
        """
        if batch_id < 0:
            raise ValueError(f"batch_id must be >= 0, got {batch_id}")
        lost: DeltaError | None = None
        for attempt in range(1, COMMIT_ATTEMPTS_MAX + 1):
            table = self._table()
            done = _app_version(table, self.app_id)
            if done >= batch_id:
                assert table is not None
                self._log_skip(batch_id, done, raced=lost is not None)
                return BatchCommit(batch_id, 0, True, table.version())
            try:
                table_version = self._append(table, data, batch_id)
            except DeltaError as err:
                if not self._lost_race(table, err):
                    raise
                lost = err
                logger.info("%s: batch %d of app %s: commit attempt %d/%d on version %d lost "
                            "to a concurrent commit (%s): re-reading", self.table_uri, batch_id,
                            self.app_id, attempt, COMMIT_ATTEMPTS_MAX,
                            -1 if table is None else table.version(), err)
                continue
            return BatchCommit(batch_id, data.num_rows, False, table_version)
        raise CommitAttemptsExhaustedError(self.table_uri, self.app_id, batch_id,
                                           COMMIT_ATTEMPTS_MAX) from lost

    def _append(self, table: DeltaTable | None, data: pa.Table, batch_id: int) -> int:
        """Commit `data` with the app transaction on exactly `table`'s snapshot (or create the
        table when `table` is None); returns the version committed."""
        properties = CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)],
                                      max_commit_retries=COMMIT_RETRIES_DELTA_RS)
        partition_by = list(self.partition_by) or None
        if table is None:
            write_deltalake(self.table_uri, data, mode="error", partition_by=partition_by,
                            storage_options=self._storage_options(),
                            commit_properties=properties)
            return 0  # a table is created by its version 0
        version_read = table.version()
        write_deltalake(table, data, mode="append", partition_by=partition_by,
                        commit_properties=properties)
        assert table.version() == version_read + 1, (version_read, table.version())
        return table.version()

    def _lost_race(self, table: DeltaTable | None, err: DeltaError) -> bool:
        """Whether `err` means another commit took the version this attempt was made for."""
        if isinstance(err, CommitFailedError):
            return True
        # creating: a concurrent creator finished before our write looked ("already exists")
        return table is None and self._table() is not None

    def _log_skip(self, batch_id: int, done: int, *, raced: bool) -> None:
        if raced:  # another writer of this app committed it just now: two drivers of one query?
            logger.warning("%s: batch %d was committed concurrently by another writer of app "
                           "%s (now at %d): skipped", self.table_uri, batch_id, self.app_id, done)
        else:
            logger.info("batch %d already in %s (app %s at %d): skipped", batch_id,
                        self.table_uri, self.app_id, done)

    def _storage_options(self) -> dict[str, str] | None:
        return dict(self.storage_options) if self.storage_options else None

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.table_uri, storage_options=self._storage_options())
        except TableNotFoundError:
            return None


def _app_version(table: DeltaTable | None, app_id: str) -> int:
    """The last batch id `table`'s snapshot records for `app_id`, or -1."""
    if table is None:
        return -1
    version = table.transaction_version(app_id)
    return -1 if version is None else int(version)

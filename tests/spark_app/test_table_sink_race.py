"""Racing writers of one query (a zombie driver and its replacement) append a batch once.

Goal: when several processes commit the same (app id, batch id) at the same moment, the batch
is in the table exactly once, one writer commits it and every other one reports it skipped; a
stale writer (an older batch id, racing the newer one) is skipped and appends nothing; a commit
made on a stale read fails and is re-decided (skip, or retry when another app moved the table),
never rebased into a duplicate.
Method: the stale-read cases are made deterministic by running the competing commit inside the
committer's call to `write_deltalake` (after its read, before its commit). The races start a
pool of writer processes once (multiprocessing *spawn*: each has its own delta-rs runtime and
they share nothing but the table directory); for every round the parent prepares a fresh table
whose app is at batch 4, hands each writer its task, and the writers leave a shared `Barrier`
together, so their read-then-commit windows overlap. Outcomes of all rounds are collected
before asserting, so a failure says how often it happened. The default suite runs a short
search (~15 s); `-m slow` runs a long one (~3 min).
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.synchronize
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.queues import Queue
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from spark_app import table_sink
from spark_app.table_sink import (
    COMMIT_ATTEMPTS_MAX,
    CommitAttemptsExhaustedError,
    DeltaBatchCommitter,
)

APP_ID = "app-1"
BATCH_ROWS = 10
BATCH_DONE_ID = 4  # every iteration's table starts with the app at this batch
BARRIER_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 120.0
WRITERS_COUNT = 4
ITERATIONS_COUNT = 150
WRITERS_SLOW_COUNT = 8
ITERATIONS_SLOW_COUNT = 1000


def _batch(batch_id: int) -> pa.Table:
    """Batch `batch_id`'s rows: the same for every writer, as a replayed micro-batch is."""
    first = batch_id * BATCH_ROWS
    return pa.table({"seq": pa.array(range(first, first + BATCH_ROWS), pa.int64()),
                     "batch": pa.array([batch_id] * BATCH_ROWS, pa.int64())})


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    table_uri: str
    batch_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    batch_id: int
    status: str  # "committed" | "skipped" | "error"
    detail: str


def _writer_loop(tasks: Queue[Task | None], outcomes: Queue[Outcome],
                 start: multiprocessing.synchronize.Barrier) -> None:
    """One writer process: per task, prepare, wait for the others at `start`, commit, report.

    Runs until the `None` sentinel (one loop per process; the parent bounds it)."""
    while (task := tasks.get()) is not None:
        committer = DeltaBatchCommitter(task.table_uri, APP_ID)
        data = _batch(task.batch_id)
        start.wait(timeout=BARRIER_TIMEOUT_S)
        try:
            result = committer.commit(data, task.batch_id)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
            outcomes.put(Outcome(task.batch_id, "error", repr(exc)))
            continue
        status = "skipped" if result.skipped else "committed"
        outcomes.put(Outcome(task.batch_id, status, str(result.rows)))


class WriterPool:
    """`writers_count` spawned writer processes that start each round together."""

    def __init__(self, writers_count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.start = context.Barrier(writers_count)
        self.outcomes: Queue[Outcome] = context.Queue()
        self.tasks: list[Queue[Task | None]] = [context.Queue() for _ in range(writers_count)]
        self.processes = [context.Process(target=_writer_loop, daemon=True,
                                          args=(tasks, self.outcomes, self.start))
                          for tasks in self.tasks]
        for process in self.processes:
            process.start()

    def run(self, table_uri: str, batch_ids: list[int]) -> list[Outcome]:
        """One round: writer i commits batch_ids[i]; returns every writer's outcome."""
        assert len(batch_ids) == len(self.tasks)
        for tasks, batch_id in zip(self.tasks, batch_ids, strict=True):
            tasks.put(Task(table_uri, batch_id))
        return [self.outcomes.get(timeout=RESULT_TIMEOUT_S) for _ in batch_ids]

    def close(self) -> None:
        for tasks in self.tasks:
            tasks.put(None)
        for process in self.processes:
            process.join(timeout=RESULT_TIMEOUT_S)
            assert process.exitcode == 0, f"writer {process.pid} exited with {process.exitcode}"


@pytest.fixture(scope="module")
def pool() -> Iterator[WriterPool]:
    writers = WriterPool(WRITERS_COUNT)
    yield writers
    writers.close()


@pytest.fixture(scope="module")
def pool_slow() -> Iterator[WriterPool]:
    writers = WriterPool(WRITERS_SLOW_COUNT)
    yield writers
    writers.close()


def _table_at_batch(uri: str, batch_id: int) -> None:
    """A table whose app has committed batches 0..batch_id."""
    committer = DeltaBatchCommitter(uri, APP_ID)
    for done in range(batch_id + 1):
        committer.commit(_batch(done), done)


def _batch_row_counts(uri: str) -> Counter[int]:
    """Rows per batch id in the table (a batch appended twice shows 2 * BATCH_ROWS)."""
    return Counter(DeltaTable(uri).to_pyarrow_table().column("batch").to_pylist())


def _problems(uri: str, batch_ids: list[int], outcomes: list[Outcome]) -> list[str]:
    """What is wrong with one round: each batch up to the newest once, one commit per new
    batch, every other writer skipped, no errors."""
    found = [f"writer of {o.batch_id}: {o.detail}" for o in outcomes if o.status == "error"]
    counts = _batch_row_counts(uri)
    wanted = {batch_id: BATCH_ROWS for batch_id in range(max(batch_ids) + 1)}
    if dict(counts) != wanted:
        found.append(f"rows per batch {dict(sorted(counts.items()))}")
    commits = Counter(o.batch_id for o in outcomes if o.status == "committed")
    for batch_id in sorted(set(batch_ids)):
        expected_count = 1 if batch_id > BATCH_DONE_ID else 0
        if commits[batch_id] != expected_count:
            found.append(f"batch {batch_id} committed by {commits[batch_id]} writers")
    return found


def _search(pool: WriterPool, tmp_path: Path, batch_ids: list[int], iterations_count: int,
            ) -> None:
    failures: dict[int, list[str]] = {}
    for iteration in range(iterations_count):
        uri = str(tmp_path / f"table-{iteration}")
        _table_at_batch(uri, BATCH_DONE_ID)
        outcomes = pool.run(uri, batch_ids)
        found = _problems(uri, batch_ids, outcomes)
        if found:
            failures[iteration] = found
    assert not failures, (f"{len(failures)} of {iterations_count} rounds went wrong: "
                          f"{dict(list(failures.items())[:5])}")


def test_writers_of_one_batch_append_it_once(pool: WriterPool, tmp_path: Path) -> None:
    _search(pool, tmp_path, [BATCH_DONE_ID + 1] * WRITERS_COUNT, ITERATIONS_COUNT)


def test_stale_writers_racing_the_next_batch_are_skipped(pool: WriterPool,
                                                         tmp_path: Path) -> None:
    """Zombies replay batch 4 (already committed) while the new driver commits batch 5."""
    half = WRITERS_COUNT // 2
    batch_ids = [BATCH_DONE_ID] * half + [BATCH_DONE_ID + 1] * (WRITERS_COUNT - half)
    _search(pool, tmp_path, batch_ids, ITERATIONS_COUNT)


@pytest.mark.slow
def test_writers_of_one_batch_append_it_once_long(pool_slow: WriterPool,
                                                  tmp_path: Path) -> None:
    _search(pool_slow, tmp_path, [BATCH_DONE_ID + 1] * WRITERS_SLOW_COUNT, ITERATIONS_SLOW_COUNT)


@pytest.mark.slow
def test_stale_writers_racing_the_next_batch_are_skipped_long(pool_slow: WriterPool,
                                                              tmp_path: Path) -> None:
    half = WRITERS_SLOW_COUNT // 2
    batch_ids = [BATCH_DONE_ID] * half + [BATCH_DONE_ID + 1] * (WRITERS_SLOW_COUNT - half)
    _search(pool_slow, tmp_path, batch_ids, ITERATIONS_SLOW_COUNT)


def _before_each_write(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None],
                       *, times_count: int = 1) -> list[int]:
    """Run `action` (a competing commit) inside the next `times_count` calls the committer makes
    to `write_deltalake`: after it read the table, before it commits. Returns, per intercepted
    call, the version the committer read (-1: no table yet)."""
    write = table_sink.write_deltalake
    versions_read: list[int] = []

    def write_after_action(table_or_uri: object, *args: object, **kwargs: object) -> None:
        versions_read.append(table_or_uri.version() if isinstance(table_or_uri, DeltaTable)
                             else -1)
        if len(versions_read) == times_count:
            monkeypatch.setattr(table_sink, "write_deltalake", write)
        with monkeypatch.context() as inner:  # the competing writer writes unintercepted
            inner.setattr(table_sink, "write_deltalake", write)
            action()
        write(table_or_uri, *args, **kwargs)

    monkeypatch.setattr(table_sink, "write_deltalake", write_after_action)
    return versions_read


def _commits_of(committer: DeltaBatchCommitter, batch_ids: list[int]) -> Callable[[], None]:
    """A competing writer committing `batch_ids` (each must be appended)."""
    def commit() -> None:
        for batch_id in batch_ids:
            assert committer.commit(_batch(batch_id), batch_id).skipped is False
    return commit


@pytest.mark.parametrize("batches_committed_meanwhile", [[5], [5, 6]])
def test_a_commit_on_a_stale_read_is_skipped_not_appended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        batches_committed_meanwhile: list[int]) -> None:
    """The zombie reads the app at 4; the new driver commits 5 (and 6) before the zombie's
    commit of 5, which must fail on its read and end as a skip."""
    uri = str(tmp_path / "table")
    _table_at_batch(uri, BATCH_DONE_ID)
    version_before = DeltaTable(uri).version()
    driver = DeltaBatchCommitter(uri, APP_ID)
    versions_read = _before_each_write(monkeypatch,
                                       _commits_of(driver, batches_committed_meanwhile))
    with caplog.at_level(logging.INFO, logger=table_sink.__name__):
        result = DeltaBatchCommitter(uri, APP_ID).commit(_batch(5), 5)
    batch_last_id = batches_committed_meanwhile[-1]
    assert dict(_batch_row_counts(uri)) == {b: BATCH_ROWS for b in range(batch_last_id + 1)}
    assert (result.skipped, result.rows) == (True, 0)
    assert result.table_version == version_before + len(batches_committed_meanwhile)
    assert versions_read == [version_before]  # it did try to commit on the stale read
    assert "lost to a concurrent commit" in caplog.text
    assert "committed concurrently by another writer" in caplog.text


def test_a_commit_on_a_read_made_stale_by_another_app_is_retried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another query's commit between our read and our commit is not ours to skip on: the
    attempt fails, the re-read still shows the batch missing, and the next attempt appends it."""
    uri = str(tmp_path / "table")
    _table_at_batch(uri, BATCH_DONE_ID)
    version_before = DeltaTable(uri).version()
    other = DeltaBatchCommitter(uri, "app-2")
    versions_read = _before_each_write(monkeypatch, _commits_of(other, [100]))
    result = DeltaBatchCommitter(uri, APP_ID).commit(_batch(5), 5)
    counts = _batch_row_counts(uri)
    assert (counts[5], counts[100]) == (BATCH_ROWS, BATCH_ROWS)
    assert (result.skipped, result.rows) == (False, BATCH_ROWS)
    assert DeltaTable(uri).transaction_version(APP_ID) == 5
    assert result.table_version == version_before + 2  # after the other app's commit
    assert versions_read == [version_before]


def test_a_table_created_between_read_and_commit_is_not_appended_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The zombie finds no table; the new driver creates it with batch 0 first: the zombie's
    creating commit fails instead of appending batch 0 to the new table."""
    uri = str(tmp_path / "table")
    driver = DeltaBatchCommitter(uri, APP_ID)
    versions_read = _before_each_write(monkeypatch, _commits_of(driver, [0]))
    result = DeltaBatchCommitter(uri, APP_ID).commit(_batch(0), 0)
    assert dict(_batch_row_counts(uri)) == {0: BATCH_ROWS}
    assert (result.skipped, result.table_version) == (True, 0)
    assert versions_read == [-1]


def test_losing_every_attempt_raises_after_the_limit_and_appends_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another query commits before every one of our attempts: the committer gives up after
    COMMIT_ATTEMPTS_MAX re-reads with a retriable error, and the batch is not in the table."""
    uri = str(tmp_path / "table")
    _table_at_batch(uri, BATCH_DONE_ID)
    other = DeltaBatchCommitter(uri, "app-2")
    other_batch_ids = iter(range(100, 100 + COMMIT_ATTEMPTS_MAX))
    versions_read = _before_each_write(monkeypatch,
                                       lambda: _commits_of(other, [next(other_batch_ids)])(),
                                       times_count=COMMIT_ATTEMPTS_MAX)
    with pytest.raises(CommitAttemptsExhaustedError, match="batch 5 of app app-1") as raised:
        DeltaBatchCommitter(uri, APP_ID).commit(_batch(5), 5)
    assert raised.value.attempts_count == COMMIT_ATTEMPTS_MAX
    assert isinstance(raised.value.__cause__, CommitFailedError)
    assert len(versions_read) == COMMIT_ATTEMPTS_MAX
    assert versions_read == sorted(set(versions_read))  # each attempt re-read the table
    assert 5 not in _batch_row_counts(uri)
    assert DeltaTable(uri).transaction_version(APP_ID) == BATCH_DONE_ID

"""The offline Delta committer appends each micro-batch exactly once.

Goal: replaying a batch id (Spark re-runs the last batch after a crash between the table commit
and its own commit log) adds nothing; empty batches still record progress; two queries (two
app ids) on one table do not skip each other's batches; a killed writer process leaves the
table consistent and a rerun completes it. Method: real delta-rs writes into tmp_path and reads
back through deltalake; the crash is a real SIGKILL of a child process between batches.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from spark_app.table_sink import DeltaBatchCommitter, app_id_for_checkpoint


def _batch(first: int, count: int) -> pa.Table:
    return pa.table({"seq": pa.array(range(first, first + count), pa.int64()),
                     "body": pa.array([b"m%d" % n for n in range(first, first + count)])})


def _rows(uri: str) -> list[int]:
    return sorted(DeltaTable(uri).to_pyarrow_table().column("seq").to_pylist())


def test_replayed_batches_are_skipped(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    committer = DeltaBatchCommitter(uri, app_id_for_checkpoint(str(tmp_path / "ckpt")))
    assert committer.committed_version() == -1
    first = committer.commit(_batch(0, 10), 0)
    assert (first.rows, first.skipped) == (10, False)
    replay = committer.commit(_batch(0, 10), 0)
    assert (replay.rows, replay.skipped, replay.table_version) == (0, True, first.table_version)
    assert committer.commit(_batch(10, 0), 1).skipped is False  # empty batch records progress
    assert committer.committed_version() == 1
    assert committer.commit(_batch(10, 0), 1).skipped is True
    committer.commit(_batch(10, 5), 2)
    assert _rows(uri) == list(range(15))


def test_two_queries_on_one_table_do_not_skip_each_other(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    one = DeltaBatchCommitter(uri, app_id_for_checkpoint(str(tmp_path / "ckpt-1")))
    two = DeltaBatchCommitter(uri, app_id_for_checkpoint(str(tmp_path / "ckpt-2")))
    assert one.app_id != two.app_id
    one.commit(_batch(0, 3), 0)
    two.commit(_batch(100, 3), 0)
    one.commit(_batch(3, 3), 1)
    assert _rows(uri) == [0, 1, 2, 3, 4, 5, 100, 101, 102]


def test_app_id_is_stable_for_a_checkpoint_path(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    assert app_id_for_checkpoint(str(path)) == app_id_for_checkpoint(str(path) + "/../ckpt")
    assert app_id_for_checkpoint("s3://b/ckpt") != app_id_for_checkpoint("s3://b/other")


def test_negative_batch_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_id"):
        DeltaBatchCommitter(str(tmp_path / "t"), "app").commit(_batch(0, 1), -1)


WRITER = """
import os, sys
import pyarrow as pa
from spark_app.table_sink import DeltaBatchCommitter
committer = DeltaBatchCommitter(sys.argv[1], "app")
for batch_id in range(int(sys.argv[2])):
    first = batch_id * 100
    committer.commit(pa.table({"seq": pa.array(range(first, first + 100), pa.int64()),
                               "body": pa.array([b"x"] * 100)}), batch_id)
    print(batch_id, flush=True)
    if batch_id == int(sys.argv[3]):
        os.kill(os.getpid(), 9)
"""


def test_killed_writer_then_rerun_from_zero_writes_each_batch_once(tmp_path: Path) -> None:
    """A rerun replays batches 0..N (as a restarted query would replay its uncommitted tail):
    the committed ones are skipped, the rest appended."""
    uri = str(tmp_path / "table")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    killed = subprocess.run([sys.executable, "-c", WRITER, uri, "6", "2"], env=env, check=False,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert _rows(uri) == list(range(300))
    rerun = subprocess.run([sys.executable, "-c", WRITER, uri, "6", "-1"], env=env, check=False,
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert _rows(uri) == list(range(600))

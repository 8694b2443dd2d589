"""Fail-stop on fsync errors, in process: after a failed fsync nothing is acknowledged or retried.

Goal: the store never answers PUT_OK for a put whose fsync failed, never calls fsync again (a
second fsync can "succeed" over pages the kernel dropped: fsyncgate), never writes a clean
checkpoint over them, and a reopen recovers every put acknowledged before the failure. Method:
a SYNC_FLUSH store whose `os.fdatasync` fails with EIO from a chosen moment (the IO boundary),
with a recording fsync failure handler in place of the production one (which ends the process,
see tests/integration/test_fsync_failure.py).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_engine import (
    FlushDiskType,
    FsyncFailedError,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutStatus,
    StoreConfig,
    decode_record,
    set_fsync_failure_handler,
)

CONFIG = StoreConfig(commit_log_segment_size_bytes=256 * 1024,
                     message_size_max_bytes=16 * 1024, consume_queue_segment_entries=64,
                     flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=2000)


@pytest.fixture
def failures() -> Iterator[list[str]]:
    seen: list[str] = []
    previous = set_fsync_failure_handler(lambda err, path: seen.append(path))
    yield seen
    set_fsync_failure_handler(previous)


def test_a_failed_fsync_is_final(tmp_path: Path, failures: list[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = MessageStore(tmp_path, CONFIG)
    ok = store.put_messages(MessageBatch(topic="t", bodies=[b"acked"], queue_ids=[0]))
    assert ok.status is PutStatus.PUT_OK
    calls: list[int] = []

    def failing(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    failed = store.put_messages(MessageBatch(topic="t", bodies=[b"lost?"], queue_ids=[0]))
    assert failed.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert failures and "commitlog" in failures[0]
    assert len(calls) == 1  # tried once, never again
    monkeypatch.undo()  # the disk "works" again: a retry would now succeed over lost pages
    later = store.put_messages(MessageBatch(topic="t", bodies=[b"after"], queue_ids=[0]))
    assert later.status is PutStatus.SERVICE_NOT_AVAILABLE  # stopped: nothing is even written
    assert "failed fsync" in later.error
    with pytest.raises(FsyncFailedError):
        store.flush()
    assert store.stats().flushed_log_position == ok.log_position_end
    store.close()
    assert (tmp_path / "abort").exists()  # no clean checkpoint: the reopen recovers
    reopened = MessageStore(tmp_path, dataclasses.replace(CONFIG))
    try:
        assert reopened.stats().recovered_after_crash
        got = reopened.get_messages("t", 0, 0, max_count=10, max_bytes=1 << 20)
        assert got.status is GetStatus.FOUND
        assert decode_record(got.records[0]).body == b"acked"
    finally:
        reopened.close()

"""Checkpoints written by the flush thread while a truncation runs (store_recovery.write_checkpoint,
replica_log.truncate_to): the truncation's intent must survive until its cut is done, so a crash
in the middle of the cut is redone on open, whatever the flush thread wrote meanwhile.

Deterministic: the store is flush-driven and the "flush thread" is a thread of the test, held
at a seam (CommitLog.flush, after it took its snapshot of the positions) until the truncation
has written its intent checkpoint."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from storage_engine import Message, MessageStore, PutStatus, StorageError, store_recovery
from storage_engine.checkpoint import read_checkpoint
from tests.storage_engine.test_engine_basics import SMALL, fill, read_all_unconfirmed

WAIT_S = 120.0  # generous: the suite runs at load 10-20
OVERLAP_WAIT_S = 1.0  # a wait for what must not happen (the test passes through it)


def _record_boundary_past_half(store: MessageStore) -> int:
    cut = store.log_position_end // 2
    store.set_confirm_log_position(store.log_position_end)
    result = store.get_messages("T", 0, 0, max_count=2000, max_bytes=1 << 24)
    boundary = min(m.log_position for m in result.messages() if m.log_position >= cut)
    store.set_confirm_log_position(0)
    return boundary


def _crash_and_reopen_end(store: MessageStore, tmp_path: Path) -> tuple[int, list[int]]:
    store._flush.stop()
    store._release(clean=False)  # power cut: no clean checkpoint, the abort marker stays
    with MessageStore(tmp_path, SMALL, auto_confirm=False) as reopened:
        return reopened.log_position_end, read_all_unconfirmed(reopened)


def test_flush_thread_checkpoint_during_a_cut_keeps_the_intent(tmp_path: Path,
                                                               monkeypatch) -> None:
    store = MessageStore(tmp_path, SMALL, auto_confirm=False, flush_driven=True)
    fill(store, 1500)
    end = store.log_position_end
    boundary = _record_boundary_past_half(store)
    commit_log = store._commit_log
    flush = commit_log.flush
    snapshot_taken, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def held_flush() -> int:  # the flush thread's CommitLog.flush, after its snapshot
        if threading.current_thread() is flusher:
            snapshot_taken.set()
            assert go.wait(WAIT_S)
        return flush()

    def flush_thread() -> None:
        try:
            store.checkpoint_step()
        except BaseException as err:  # noqa: BLE001 - reported by the test thread
            errors.append(err)

    def cut_then_power_cut(position: int) -> None:
        assert read_checkpoint(tmp_path / "checkpoint").truncate_intent_log_position == boundary
        go.set()  # the flush thread's checkpoint lands now, between the intent and the cut
        flusher.join(WAIT_S)
        assert not flusher.is_alive()
        raise OSError("power cut during truncation")

    monkeypatch.setattr(commit_log, "flush", held_flush)
    flusher = threading.Thread(target=flush_thread, name="flush-test")
    flusher.start()
    assert snapshot_taken.wait(WAIT_S)
    monkeypatch.setattr(commit_log._segments, "truncate_to", cut_then_power_cut)
    with pytest.raises(OSError, match="power cut"):
        store.truncate_to(boundary)
    monkeypatch.undo()
    assert not errors
    assert read_checkpoint(tmp_path / "checkpoint").truncate_intent_log_position == boundary
    reopened_end, survivors = _crash_and_reopen_end(store, tmp_path)
    assert end > boundary
    assert reopened_end == boundary
    assert survivors and all(position < boundary for position in survivors)


def _store_after_a_failed_cut(tmp_path: Path, monkeypatch) -> tuple[MessageStore, int]:
    """A store whose truncation to the returned boundary failed half way (an unlink raised)."""
    store = MessageStore(tmp_path, SMALL, auto_confirm=False, flush_driven=True)
    fill(store, 1500)
    boundary = _record_boundary_past_half(store)

    def failing_cut(position: int) -> None:
        raise OSError("unlink failed")

    monkeypatch.setattr(store._commit_log._segments, "truncate_to", failing_cut)
    with pytest.raises(OSError, match="unlink failed"):
        store.truncate_to(boundary)
    monkeypatch.undo()
    return store, boundary


def test_checkpoint_after_a_failed_cut_keeps_the_intent(tmp_path: Path, monkeypatch) -> None:
    """The cut fails without a crash: the store stays open and its next checkpoint must still
    carry the intent, else a crash then brings the half-cut tail back."""
    store, boundary = _store_after_a_failed_cut(tmp_path, monkeypatch)
    assert store.checkpoint_step()  # the flush thread's next checkpoint
    assert read_checkpoint(tmp_path / "checkpoint").truncate_intent_log_position == boundary
    reopened_end, survivors = _crash_and_reopen_end(store, tmp_path)
    assert reopened_end == boundary
    assert survivors and all(position < boundary for position in survivors)


def test_a_retried_cut_clears_the_intent(tmp_path: Path, monkeypatch) -> None:
    store, boundary = _store_after_a_failed_cut(tmp_path, monkeypatch)
    refused = store.put_message(Message(topic="T", body=b"x"))  # nothing lands past a half cut
    assert refused.status is PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StorageError, match="failed half way"):
        store.append_replicated(store.log_position_end, b"")
    store.truncate_to(boundary + 1)  # asks for less than the pending cut: the pending one runs
    assert store.log_position_end == boundary
    assert read_checkpoint(tmp_path / "checkpoint").truncate_intent_log_position == -1
    assert store.put_message(Message(topic="T", body=b"x")).status is PutStatus.PUT_OK
    store.close()
    with MessageStore(tmp_path, SMALL, auto_confirm=False) as reopened:
        assert reopened.log_position_end > boundary


def test_two_checkpoint_files_are_never_written_at_once(tmp_path: Path, monkeypatch) -> None:
    """Both writers use the same temp file (files.atomic_write_bytes): overlapping, one rename
    fails or the checkpoint is replaced by the other's half-written temp file. The flush
    thread's write is held open; the truncation's write must wait for it. OVERLAP_WAIT_S is
    how long the held write gives the other to show up (it must not: this wait passes
    only when nothing happens)."""
    store = MessageStore(tmp_path, SMALL, auto_confirm=False, flush_driven=True)
    fill(store, 300)
    boundary = _record_boundary_past_half(store)
    inside, entered_twice = threading.Event(), threading.Event()
    writing = 0
    original = store_recovery.write_checkpoint_file

    def counted_write(*args, **kwargs) -> None:  # a pass-through seam
        nonlocal writing
        writing += 1
        if writing > 1:
            entered_twice.set()
        if threading.current_thread() is flusher:
            inside.set()
            entered_twice.wait(OVERLAP_WAIT_S)
        try:
            original(*args, **kwargs)
        finally:
            writing -= 1

    monkeypatch.setattr(store_recovery, "write_checkpoint_file", counted_write)
    flusher = threading.Thread(target=store.checkpoint_step, name="flush-test")
    flusher.start()
    assert inside.wait(WAIT_S)
    truncation = threading.Thread(target=store.truncate_to, args=(boundary,))
    truncation.start()
    for thread in (flusher, truncation):
        thread.join(WAIT_S)
        assert not thread.is_alive()
    assert not entered_twice.is_set()
    assert store.log_position_end == boundary
    store.close()
    with MessageStore(tmp_path, SMALL, auto_confirm=False) as reopened:
        assert reopened.log_position_end == boundary

"""FileRaftStorage: what a controller finds on disk after restarts, torn writes and damage.

Goal: saved entries, hard state and snapshots come back exactly; an unfinished tail (written
past the superblock's durable length) is cut; damage inside fsynced data is refused
(CorruptLogError / CorruptSnapshotError) rather than silently shortened; a torn superblock slot
falls back to the other one; conflict truncation and compaction survive reopening; a writer
SIGKILLed mid-stream never loses a save that returned. Method: real files in tmp_path, bytes
altered by hand, and one subprocess killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controller.errors import CorruptLogError, CorruptSnapshotError
from controller.raft import (
    Entry,
    EntryKind,
    FileRaftStorage,
    HardState,
    PersistentState,
    Snapshot,
)

ROOT = Path(__file__).resolve().parents[2]


def _entries(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(i, term, EntryKind.NORMAL, b"cmd-%d" % i) for i in range(first, last + 1)]


def _reopen(path: Path) -> tuple[FileRaftStorage, PersistentState]:
    storage = FileRaftStorage(path)
    return storage, storage.load()


def test_entries_hard_state_and_snapshots_come_back(tmp_path: Path) -> None:
    storage, state = _reopen(tmp_path)
    storage.save(snapshot=None, entries=_entries(1, 5), hard_state=HardState(2, 3, 4))
    storage.close()
    storage, state = _reopen(tmp_path)
    assert state.hard_state == HardState(2, 3, 4)
    assert list(state.entries) == _entries(1, 5)
    storage.compact(Snapshot(3, 1, (1, 2, 3), b"state@3"))
    storage.save(snapshot=None, entries=_entries(6, 7), hard_state=None)
    storage.close()
    storage, state = _reopen(tmp_path)
    assert state.snapshot == Snapshot(3, 1, (1, 2, 3), b"state@3")
    assert [e.entry_index for e in state.entries] == [4, 5, 6, 7]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "superblock")[:1] == [
        "log-00000002"]  # the old generation is gone
    storage.close()


def test_a_conflict_rewrites_the_tail_and_survives_reopening(tmp_path: Path) -> None:
    storage, _ = _reopen(tmp_path)
    storage.save(snapshot=None, entries=_entries(1, 6, term=1), hard_state=HardState(1, 1, 2))
    storage.save(snapshot=None, entries=_entries(4, 5, term=2), hard_state=HardState(2, 2, 2))
    storage.close()
    _, state = _reopen(tmp_path)
    terms = [(e.entry_index, e.term) for e in state.entries]
    assert terms == [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)]


def test_a_leader_snapshot_replaces_the_log(tmp_path: Path) -> None:
    storage, _ = _reopen(tmp_path)
    storage.save(snapshot=None, entries=_entries(1, 3), hard_state=HardState(1, None, 1))
    storage.save(snapshot=Snapshot(10, 3, (1, 2, 3), b"s"), entries=(),
                 hard_state=HardState(3, None, 10))
    storage.save(snapshot=None, entries=[Entry(11, 3, EntryKind.NOOP, b"")], hard_state=None)
    storage.close()
    _, state = _reopen(tmp_path)
    assert state.snapshot.entry_index == 10
    assert [e.entry_index for e in state.entries] == [11]


def test_an_unfinished_tail_is_cut_but_fsynced_damage_is_refused(tmp_path: Path) -> None:
    storage, _ = _reopen(tmp_path)
    storage.save(snapshot=None, entries=_entries(1, 3), hard_state=HardState(1, None, 3))
    storage.close()
    log = tmp_path / "log-00000001"
    size = log.stat().st_size
    with open(log, "ab") as file:  # a save that crashed before its superblock write
        file.write(b"\x00\x00\x00\x30garbage-tail")
    storage, state = _reopen(tmp_path)
    assert len(state.entries) == 3 and log.stat().st_size == size
    storage.close()
    data = bytearray(log.read_bytes())
    data[size // 2] ^= 0x40  # a flipped bit inside what a completed save fsynced
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="checksum"):
        FileRaftStorage(tmp_path).load()


def test_a_torn_superblock_slot_falls_back_to_the_previous_state(tmp_path: Path) -> None:
    storage, _ = _reopen(tmp_path)
    storage.save(snapshot=None, entries=_entries(1, 2), hard_state=HardState(1, 1, 1))
    storage.save(snapshot=None, entries=(), hard_state=HardState(2, 2, 1))
    storage.close()
    superblock = tmp_path / "superblock"
    data = bytearray(superblock.read_bytes())
    data[10] ^= 0xFF  # the newer write (seq 2 lives in slot 0) is torn...
    data[64 + 10] ^= 0xFF  # ...and the older one too: both slots damaged
    superblock.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="both slots"):
        FileRaftStorage(tmp_path).load()
    data[64 + 10] ^= 0xFF  # repair the older slot only
    superblock.write_bytes(bytes(data))
    _, state = _reopen(tmp_path)
    assert state.hard_state == HardState(1, 1, 1)


def test_a_sigkilled_writer_never_loses_a_returned_save(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env,
    )
    assert writer.stdout is not None
    acked = 0
    deadline = time.monotonic() + 10
    while acked < 300 and time.monotonic() < deadline:
        line = writer.stdout.readline()
        if not line:
            break
        acked = int(line)
    writer.send_signal(signal.SIGKILL)
    writer.wait(10)
    writer.stdout.close()
    assert acked >= 300, "the writer did not get going"
    _, state = _reopen(tmp_path)
    entries = state.entries
    snapshot_index = state.snapshot.entry_index if state.snapshot else 0
    assert snapshot_index + len(entries) >= acked
    for entry in entries:
        assert entry.data == b"cmd-%d" % entry.entry_index
    assert state.hard_state.term >= acked // 50


# A child that saves one entry (and every 50 a new term, every 200 a compaction) per loop and
# prints the index once `save` returned; it runs until killed.
_WRITER = """
import sys
from pathlib import Path
from controller.raft import (
    Entry,
    EntryKind,
    FileRaftStorage,
    HardState,
    PersistentState,
    Snapshot,
)
storage = FileRaftStorage(Path(sys.argv[1]))
storage.load()
index = 0
while True:
    index += 1
    storage.save(snapshot=None, entries=[Entry(index, 1, EntryKind.NORMAL, b"cmd-%d" % index)],
                 hard_state=HardState(index // 50, None, index - 1))
    if index % 200 == 0:
        storage.compact(Snapshot(index - 10, 1, (1,), b"s"))
    print(index, flush=True)
"""

"""RaftStorage: where a node's hard state, log entries and snapshot live between restarts.

`RaftStorage` is the Protocol the shell drives (`save` is durable when it returns);
`MemoryRaftStorage` keeps everything in memory (tests); `FileRaftStorage` is the real one.

Directory layout of FileRaftStorage:

    superblock                  two 64-byte slots, written alternately (see below)
    log-<generation:08d>        the log: a sequence of records, appended
    snapshot-<entry_index:020d> the current snapshot (replaced atomically)

Superblock slot (big-endian, 64 bytes; the slot with the highest valid `seq` wins):

    magic u32 'RSB1' | seq u64 | term u64 | voted_for u64 (0 = none) | commit_index u64
    | snapshot_index u64 (0 = none) | log_generation u32 | log_length_bytes u64
    | crc32 u32 over the 56 bytes before it | 4 zero bytes

The superblock is the single commit point: `log_length_bytes` says how much of the log file
was fsynced by a completed `save`, and the snapshot and log generation it names are the live
ones. So on open:
- bytes of the log past `log_length_bytes` are a torn or unfinished tail: they are cut (nothing
  was acknowledged on them, because the shell sends only after `save` returns);
- a record *inside* `log_length_bytes` that fails its checksum is corruption of fsynced data:
  `CorruptLogError` (the node must not vote or lead with a damaged log);
- a torn superblock slot leaves the other slot, the previous durable state, which still names
  files that exist (old files are deleted only after a newer superblock is fsynced).

Log record (big-endian): size u32 (bytes after the 8-byte header) | crc32 u32 over the size
field and the payload | entry_index u64 | term u64 | kind u8 | data.

Snapshot file: magic u32 'RSN1' | crc32 u32 over the rest | entry_index u64 | term u64 |
voter_count u16 | voter_id u64 * voter_count | data.

Order of writes in `save`: a snapshot from a leader (tmp file, fsync, rename, fsync dir, plus a
new empty log generation), then entries (a conflict first lowers the superblock's length to the
cut and fsyncs it, then truncates the file), fsync the log, then the superblock, fsync.
`compact` writes the snapshot, then a new log generation holding the entries after it, then the
superblock, and only then deletes the old files.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from controller.errors import CorruptLogError, CorruptSnapshotError, RaftStorageError
from controller.raft.messages import Entry, EntryKind, HardState, Ready, Snapshot

__all__ = [
    "LOG_RECORD_BYTES_MAX",
    "SNAPSHOT_BYTES_MAX",
    "FileRaftStorage",
    "MemoryRaftStorage",
    "PersistentState",
    "RaftStorage",
    "save_ready",
]

LOG_RECORD_BYTES_MAX = 4 * 1024 * 1024
SNAPSHOT_BYTES_MAX = 256 * 1024 * 1024

_SUPERBLOCK = struct.Struct(">IQQQQQIQ")
_SUPERBLOCK_MAGIC = 0x52534231  # 'RSB1'
_SLOT_BYTES = 64
_RECORD_HEADER = struct.Struct(">II")
_RECORD_BODY = struct.Struct(">QQB")
_SNAPSHOT_HEAD = struct.Struct(">II")
_SNAPSHOT_META = struct.Struct(">QQH")
_SNAPSHOT_MAGIC = 0x52534E31  # 'RSN1'


@dataclasses.dataclass(frozen=True, slots=True)
class PersistentState:
    hard_state: HardState
    snapshot: Snapshot | None
    entries: tuple[Entry, ...]


class RaftStorage(Protocol):
    def load(self) -> PersistentState: ...

    def save(
        self, *, snapshot: Snapshot | None, entries: Sequence[Entry], hard_state: HardState | None
    ) -> None:
        """Make these durable before returning. `snapshot` replaces the whole log; `entries`
        overwrite stored entries from entries[0].entry_index on."""

    def compact(self, snapshot: Snapshot) -> None:
        """Durably store our own snapshot and drop the entries it covers."""


def save_ready(storage: RaftStorage, ready: Ready) -> None:
    """Step 1 of the Ready loop: persist (with fsync) what `ready` asks for."""
    if ready.must_sync():
        storage.save(snapshot=ready.snapshot, entries=ready.entries, hard_state=ready.hard_state)


class MemoryRaftStorage:
    """Everything in memory; `save` counts as durable. For tests of cores and shells."""

    def __init__(self) -> None:
        self.hard_state = HardState(0, None, 0)
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []

    def load(self) -> PersistentState:
        return PersistentState(self.hard_state, self.snapshot, tuple(self.entries))

    def save(
        self, *, snapshot: Snapshot | None, entries: Sequence[Entry], hard_state: HardState | None
    ) -> None:
        if snapshot is not None:
            self.snapshot = snapshot
            self.entries = []
        if entries:
            first = entries[0].entry_index
            self.entries = [e for e in self.entries if e.entry_index < first] + list(entries)
        if hard_state is not None:
            self.hard_state = hard_state

    def compact(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.entries = [e for e in self.entries if e.entry_index > snapshot.entry_index]


@dataclasses.dataclass(frozen=True, slots=True)
class _Superblock:
    seq: int
    hard_state: HardState
    snapshot_index: int
    log_generation: int
    log_length_bytes: int


class FileRaftStorage:
    """The file-backed RaftStorage (layout and crash rules in the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._superblock_fd = os.open(directory / "superblock", os.O_RDWR | os.O_CREAT, 0o644)
        self._log_fd = -1
        self._super = _Superblock(0, HardState(0, None, 0), 0, 1, 0)
        self._snapshot: Snapshot | None = None
        self._positions: list[int] = []  # byte position of each stored entry, in order
        self._first_index = 1  # entry_index of the first record in the log file
        self._log_length_bytes = 0

    # -- public ----------------------------------------------------------------------------

    def load(self) -> PersistentState:
        """Read the durable state, cutting an unfinished log tail. Call once, first."""
        self._super = self._read_superblock()
        self._snapshot = self._read_snapshot(self._super.snapshot_index)
        self._first_index = self._super.snapshot_index + 1
        entries = self._open_log()
        last_index = self._first_index - 1 + len(entries)
        if self._super.hard_state.commit_index > last_index:
            raise RaftStorageError(
                str(self._directory),
                f"commit index {self._super.hard_state.commit_index} beyond the log end "
                f"{last_index}",
            )
        self._remove_stray_files()
        return PersistentState(self._super.hard_state, self._snapshot, tuple(entries))

    def save(
        self, *, snapshot: Snapshot | None, entries: Sequence[Entry], hard_state: HardState | None
    ) -> None:
        old_snapshot_index, old_generation = self._super.snapshot_index, self._super.log_generation
        if snapshot is not None:
            self._write_snapshot(snapshot)
            self._start_log_generation(snapshot.entry_index + 1, b"")
        if entries:
            self._append(entries)
            os.fsync(self._log_fd)
        self._write_superblock(
            hard_state=hard_state or self._super.hard_state,
            snapshot_index=snapshot.entry_index if snapshot else self._super.snapshot_index,
        )
        if snapshot is not None:
            self._remove_old(old_snapshot_index, old_generation)

    def compact(self, snapshot: Snapshot) -> None:
        index = snapshot.entry_index
        last_index = self._first_index - 1 + len(self._positions)
        assert self._super.snapshot_index < index <= last_index, (index, last_index)
        old_snapshot_index, old_generation = self._super.snapshot_index, self._super.log_generation
        self._write_snapshot(snapshot)
        kept_from = self._positions[index + 1 - self._first_index] if index < last_index else (
            self._log_length_bytes
        )
        tail = os.pread(self._log_fd, self._log_length_bytes - kept_from, kept_from)
        self._start_log_generation(index + 1, tail)
        self._write_superblock(hard_state=self._super.hard_state, snapshot_index=index)
        self._remove_old(old_snapshot_index, old_generation)

    def close(self) -> None:
        for fd in (self._log_fd, self._superblock_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._superblock_fd = -1

    # -- log -------------------------------------------------------------------------------

    def _log_path(self, generation: int) -> Path:
        return self._directory / f"log-{generation:08d}"

    def _open_log(self) -> list[Entry]:
        path = self._log_path(self._super.log_generation)
        self._log_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._log_fd).st_size
        length = self._super.log_length_bytes
        if size < length:
            raise CorruptLogError(str(path), f"file has {size} bytes, {length} were fsynced",
                                  byte_position=size)
        data = os.pread(self._log_fd, length, 0)
        entries = _parse_log(str(path), data, self._first_index, self._positions)
        if size > length:  # the unfinished tail of a save that did not return
            os.ftruncate(self._log_fd, length)
            os.fsync(self._log_fd)
        self._log_length_bytes = length
        return entries

    def _append(self, entries: Sequence[Entry]) -> None:
        first = entries[0].entry_index
        last_index = self._first_index - 1 + len(self._positions)
        assert self._first_index <= first <= last_index + 1, (first, self._first_index, last_index)
        if first <= last_index:  # a conflict: cut from `first` on
            cut = self._positions[first - self._first_index]
            del self._positions[first - self._first_index:]
            # Lower the durable length first, so a crash mid-rewrite never finds a torn record
            # inside the fsynced range.
            self._log_length_bytes = cut
            self._write_superblock(self._super.hard_state, self._super.snapshot_index)
            os.ftruncate(self._log_fd, cut)
        chunks = []
        position = self._log_length_bytes
        for entry in entries:
            record = _encode_record(entry)
            self._positions.append(position)
            position += len(record)
            chunks.append(record)
        _write_all(self._log_fd, b"".join(chunks), self._log_length_bytes)
        self._log_length_bytes = position

    def _start_log_generation(self, first_index: int, content: bytes) -> None:
        generation = self._super.log_generation + 1
        path = self._log_path(generation)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        _write_all(fd, content, 0)
        os.fsync(fd)
        _fsync_directory(self._directory)
        positions: list[int] = []
        _parse_log(str(path), content, first_index, positions)
        if self._log_fd >= 0:
            os.close(self._log_fd)
        self._log_fd = fd
        self._positions = positions
        self._first_index = first_index
        self._log_length_bytes = len(content)
        self._super = dataclasses.replace(self._super, log_generation=generation)

    # -- superblock ------------------------------------------------------------------------

    def _write_superblock(self, hard_state: HardState, snapshot_index: int) -> None:
        seq = self._super.seq + 1
        body = _SUPERBLOCK.pack(
            _SUPERBLOCK_MAGIC, seq, hard_state.term, hard_state.voted_for or 0,
            hard_state.commit_index, snapshot_index, self._super.log_generation,
            self._log_length_bytes,
        )
        slot = body + struct.pack(">I", zlib.crc32(body))
        slot += bytes(_SLOT_BYTES - len(slot))
        _write_all(self._superblock_fd, slot, (seq % 2) * _SLOT_BYTES)
        os.fsync(self._superblock_fd)
        self._super = _Superblock(seq, hard_state, snapshot_index, self._super.log_generation,
                                  self._log_length_bytes)

    def _read_superblock(self) -> _Superblock:
        raw = os.pread(self._superblock_fd, 2 * _SLOT_BYTES, 0)
        slots = [raw[i * _SLOT_BYTES:(i + 1) * _SLOT_BYTES] for i in range(2)]
        found: list[_Superblock] = []
        damaged = 0
        for slot in slots:
            if not slot.strip(b"\0"):
                continue  # never written
            parsed = _parse_superblock(slot)
            if parsed is None:
                damaged += 1
            else:
                found.append(parsed)
        if found:
            return max(found, key=lambda block: block.seq)
        if damaged > 1:
            raise CorruptSnapshotError(str(self._directory / "superblock"), "both slots damaged")
        return _Superblock(0, HardState(0, None, 0), 0, 1, 0)  # new, or first write torn

    # -- snapshots -------------------------------------------------------------------------

    def _snapshot_path(self, entry_index: int) -> Path:
        return self._directory / f"snapshot-{entry_index:020d}"

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        if len(snapshot.data) > SNAPSHOT_BYTES_MAX:
            raise RaftStorageError(str(self._directory), "snapshot exceeds SNAPSHOT_BYTES_MAX")
        body = _SNAPSHOT_META.pack(snapshot.entry_index, snapshot.term, len(snapshot.voter_ids))
        body += b"".join(struct.pack(">Q", voter) for voter in snapshot.voter_ids)
        body += snapshot.data
        content = _SNAPSHOT_HEAD.pack(_SNAPSHOT_MAGIC, zlib.crc32(body)) + body
        path = self._snapshot_path(snapshot.entry_index)
        temp = path.with_name(path.name + ".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, content, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        _fsync_directory(self._directory)
        self._snapshot = snapshot

    def _read_snapshot(self, entry_index: int) -> Snapshot | None:
        if entry_index == 0:
            return None
        path = self._snapshot_path(entry_index)
        try:
            content = path.read_bytes()
        except FileNotFoundError as err:
            raise CorruptSnapshotError(str(path), "named by the superblock but missing") from err
        try:
            magic, crc = _SNAPSHOT_HEAD.unpack_from(content, 0)
            body = content[_SNAPSHOT_HEAD.size:]
            if magic != _SNAPSHOT_MAGIC or zlib.crc32(body) != crc:
                raise ValueError("bad magic or checksum")
            index, term, voter_count = _SNAPSHOT_META.unpack_from(body, 0)
            start = _SNAPSHOT_META.size
            voters = struct.unpack_from(f">{voter_count}Q", body, start)
            data = body[start + 8 * voter_count:]
        except (struct.error, ValueError) as err:
            raise CorruptSnapshotError(str(path), str(err)) from err
        if index != entry_index:
            raise CorruptSnapshotError(str(path), f"holds index {index}, expected {entry_index}")
        return Snapshot(index, term, tuple(voters), data)

    # -- housekeeping ----------------------------------------------------------------------

    def _remove_old(self, snapshot_index: int, generation: int) -> None:
        if snapshot_index and snapshot_index != self._super.snapshot_index:
            self._snapshot_path(snapshot_index).unlink(missing_ok=True)
        if generation != self._super.log_generation:
            self._log_path(generation).unlink(missing_ok=True)

    def _remove_stray_files(self) -> None:
        live = {"superblock", self._log_path(self._super.log_generation).name}
        if self._super.snapshot_index:
            live.add(self._snapshot_path(self._super.snapshot_index).name)
        for path in self._directory.iterdir():
            if path.name not in live and path.name.startswith(("log-", "snapshot-")):
                path.unlink()


def _encode_record(entry: Entry) -> bytes:
    payload = _RECORD_BODY.pack(entry.entry_index, entry.term, int(entry.kind)) + entry.data
    if len(payload) > LOG_RECORD_BYTES_MAX:
        raise RaftStorageError("log", f"entry {entry.entry_index} exceeds LOG_RECORD_BYTES_MAX")
    size = struct.pack(">I", len(payload))
    return size + struct.pack(">I", zlib.crc32(payload, zlib.crc32(size))) + payload


def _parse_log(path: str, data: bytes, first_index: int, positions: list[int]) -> list[Entry]:
    """Decode fsynced log bytes; every record must be whole, valid and in sequence."""
    entries: list[Entry] = []
    position = 0
    while position < len(data):
        if len(data) - position < _RECORD_HEADER.size:
            raise CorruptLogError(path, "partial record header", byte_position=position)
        size, crc = _RECORD_HEADER.unpack_from(data, position)
        end = position + _RECORD_HEADER.size + size
        if size < _RECORD_BODY.size or size > LOG_RECORD_BYTES_MAX or end > len(data):
            raise CorruptLogError(path, f"bad record size {size}", byte_position=position)
        payload = data[position + _RECORD_HEADER.size:end]
        if zlib.crc32(payload, zlib.crc32(data[position:position + 4])) != crc:
            raise CorruptLogError(path, "record checksum mismatch", byte_position=position)
        entry_index, term, kind = _RECORD_BODY.unpack_from(payload, 0)
        expected = first_index + len(entries)
        if entry_index != expected or kind not in tuple(EntryKind):
            raise CorruptLogError(path, f"record holds entry {entry_index} (kind {kind}), "
                                  f"expected {expected}", byte_position=position)
        entries.append(Entry(entry_index, term, EntryKind(kind), payload[_RECORD_BODY.size:]))
        positions.append(position)
        position = end
    return entries


def _parse_superblock(slot: bytes) -> _Superblock | None:
    body = slot[:_SUPERBLOCK.size]
    (crc,) = struct.unpack_from(">I", slot, _SUPERBLOCK.size)
    if zlib.crc32(body) != crc:
        return None
    magic, seq, term, voted_for, commit, snapshot_index, generation, length = (
        _SUPERBLOCK.unpack(body)
    )
    if magic != _SUPERBLOCK_MAGIC:
        return None
    hard_state = HardState(term, voted_for or None, commit)
    return _Superblock(seq, hard_state, snapshot_index, generation, length)


def _write_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

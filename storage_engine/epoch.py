"""Epoch file: `(epoch, start_log_position)` entries, and the fork-point search.

Every master term writes from a new epoch; the entry says where in the CommitLog that term's
first record lies. An entry's end is the next entry's start; the last entry ends at the log's
end. Two replicas that agree on an (epoch, start) pair hold the same bytes up to the smaller of
their ends for that epoch (the seeds' Epoch-StartOffset rule), which is what
`find_consistent_point` returns.

File format (text, replaced atomically): line 1 the entry count, line 2 the CRC32 of the entry
lines, then one `epoch-start_log_position` line per entry (the shape of RocketMQ's
epochFileCheckpoint).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from pathlib import Path

from storage_engine.errors import CorruptFileError, StorageError
from storage_engine.files import atomic_write_bytes
from storage_engine.fs import OS_FILE_SYSTEM, FileSystem

__all__ = ["EpochEntry", "EpochFile", "find_consistent_point"]

EPOCH_ENTRIES_MAX = 100_000


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_log_position: int


def find_consistent_point(
    local: Sequence[EpochEntry], local_end: int, remote: Sequence[EpochEntry], remote_end: int
) -> int:
    """The highest log position up to which the two logs are known to be identical, or -1.

    Walk the local entries from newest to oldest; the first one that the remote list has with
    the same start position decides: min(local end of that epoch, remote end of that epoch).
    -1 means no common epoch: the caller must refuse to guess (never truncate on it).
    """
    remote_by_epoch = {entry.epoch: index for index, entry in enumerate(remote)}
    for index in range(len(local) - 1, -1, -1):
        entry = local[index]
        remote_index = remote_by_epoch.get(entry.epoch)
        if remote_index is None:
            continue
        if remote[remote_index].start_log_position != entry.start_log_position:
            continue
        local_entry_end = (
            local[index + 1].start_log_position if index + 1 < len(local) else local_end
        )
        remote_entry_end = (
            remote[remote_index + 1].start_log_position
            if remote_index + 1 < len(remote) else remote_end
        )
        return min(local_entry_end, remote_entry_end)
    return -1


class EpochFile:
    """The store's epoch list, fsynced on every change."""

    def __init__(self, path: Path, fs: FileSystem = OS_FILE_SYSTEM) -> None:
        self._path = path
        self._fs = fs
        self._entries: list[EpochEntry] = _load(path, fs)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def last(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def append(self, epoch: int, start_log_position: int) -> None:
        """Start a new epoch at `start_log_position` (both must grow, as in RocketMQ)."""
        last = self.last
        if last is not None:
            if epoch <= last.epoch or start_log_position < last.start_log_position:
                raise StorageError(
                    f"epoch entry ({epoch}, {start_log_position}) does not follow "
                    f"({last.epoch}, {last.start_log_position})"
                )
            if start_log_position == last.start_log_position:
                # The last epoch wrote nothing: replace it (RocketMQ keeps starts distinct too).
                self._entries.pop()
        if len(self._entries) >= EPOCH_ENTRIES_MAX:
            raise StorageError(f"epoch file {self._path} holds {EPOCH_ENTRIES_MAX} entries")
        self._entries.append(EpochEntry(epoch, start_log_position))
        self._save()

    def truncate_from(self, log_position: int) -> None:
        """Drop entries that start at or after `log_position` (their data was cut)."""
        kept = [entry for entry in self._entries if entry.start_log_position < log_position]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._save()

    def truncate_before(self, log_position: int) -> None:
        """Forget epochs that ended before `log_position` (retention), keeping the one in force."""
        while len(self._entries) > 1 and self._entries[1].start_log_position <= log_position:
            self._entries.pop(0)
        self._save()

    def _save(self) -> None:
        lines = "".join(f"{e.epoch}-{e.start_log_position}\n" for e in self._entries)
        text = f"{len(self._entries)}\n{zlib.crc32(lines.encode())}\n{lines}"
        atomic_write_bytes(self._path, text.encode(), fs=self._fs)


def _load(path: Path, fs: FileSystem) -> list[EpochEntry]:
    try:
        raw = fs.read_bytes(path)
    except FileNotFoundError:
        return []
    try:
        text = raw.decode()
    except UnicodeDecodeError as err:
        raise CorruptFileError(str(path), "not text") from err
    header, _, rest = text.partition("\n")
    crc_text, _, lines = rest.partition("\n")
    try:
        count, crc = int(header), int(crc_text)
        if zlib.crc32(lines.encode()) != crc:
            raise ValueError("CRC mismatch")
        entries = []
        for line in lines.splitlines():
            epoch_text, _, start_text = line.partition("-")
            entries.append(EpochEntry(int(epoch_text), int(start_text)))
        if len(entries) != count:
            raise ValueError(f"{len(entries)} entries, header says {count}")
    except ValueError as err:
        raise CorruptFileError(str(path), str(err)) from err
    return entries

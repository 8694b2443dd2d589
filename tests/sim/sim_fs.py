"""A simulated disk for the storage engine: storage_engine.fs.FileSystem in memory, seeded.

The fake sits at the engine's IO boundary (storage_engine/fs.py), so the real store (segments,
checkpoint, epoch file, recovery) runs over it unchanged. What it models, POSIX's promises and
no more (the way TigerBeetle's testing/storage.zig and LevelDB's fault_injection_test do):

- a write reaches the page cache at once (reads and maps see it) but is durable only after
  `sync` of its file; a create, rename, unlink or mkdir is durable only after `sync_directory`
  of the directory holding the entry;
- `crash()` is a power cut: every directory goes back to its last synced entries, every file to
  its last synced content; of each file's unsynced writes (in order) none survive, or (with
  `torn_write_probability`) a random prefix does, its last write torn at a random byte; with
  `bit_flip_probability` one bit of the surviving unsynced bytes flips (a write the disk garbled
  on the way down). Open handles, maps and locks die with the process;
- a sync may fail (`sync_failure_probability`, unless `sync_failure_allowed` says no to that
  draw: a minimised cluster run leaves some out; or `fail_next_syncs(n)`): it raises EIO and, as
  Linux does (PostgreSQL's "fsyncgate"), the unsynced writes it was asked to make durable are
  dropped from the write-back while the page cache keeps showing them, so a later sync
  "succeeds" over lost data: only fail-stop is safe.

Everything random comes from the `random.Random` passed in (seeded by the caller): a run replays
exactly. `stats` counts what the faults did, so tests can check they happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import random
from collections.abc import Callable
from pathlib import Path, PurePath, PurePosixPath

__all__ = ["SimDiskFaults", "SimDiskStats", "SimFileSystem"]

_Op = tuple[str, int, bytes]  # ("w", position, data) | ("t", size, b"")


@dataclasses.dataclass(frozen=True, slots=True)
class SimDiskFaults:
    """Fault rates of one simulated disk (all 0: a disk that only loses unsynced data)."""

    torn_write_probability: float = 0.0  # per file at a crash: a prefix of its unsynced writes
    bit_flip_probability: float = 0.0  # per file at a crash: one bit of its kept unsynced bytes
    sync_failure_probability: float = 0.0  # per sync / sync_directory call


@dataclasses.dataclass(slots=True)
class SimDiskStats:
    crashes: int = 0
    syncs: int = 0
    sync_failures: int = 0
    unsynced_bytes_dropped: int = 0
    torn_writes: int = 0
    bits_flipped: int = 0
    entries_lost: int = 0  # directory entries (files, dirs) a crash undid


class _Inode:
    __slots__ = ("content", "durable", "durable_size", "mtime_s", "pending", "size")

    def __init__(self, durable: bytearray, durable_size: int, mtime_s: float) -> None:
        self.durable = durable
        self.durable_size = durable_size
        self.content = bytearray(durable)  # what reads and maps see (the page cache)
        self.size = durable_size
        self.pending: list[_Op] = []
        self.mtime_s = mtime_s

    def write(self, data: bytes, position: int) -> None:
        end = position + len(data)
        if end > len(self.content):
            self.content.extend(bytes(end - len(self.content)))  # BufferError if mapped
        self.content[position:end] = data
        self.size = max(self.size, end)
        self.pending.append(("w", position, data))

    def truncate(self, size: int) -> None:
        if size > len(self.content):
            self.content.extend(bytes(size - len(self.content)))  # BufferError if mapped
        elif size < self.size:
            self.content[size:self.size] = bytes(self.size - size)  # keeps maps valid
        self.size = size
        self.pending.append(("t", size, b""))

    def make_durable(self) -> None:
        durable = self.durable
        for kind, value, data in self.pending:
            _apply(durable, kind, value, data)
        self.durable_size = _size_after(self.durable_size, self.pending)
        self.pending = []


def _apply(buffer: bytearray, kind: str, value: int, data: bytes) -> None:
    if kind == "w":
        end = value + len(data)
        if end > len(buffer):
            buffer.extend(bytes(end - len(buffer)))
        buffer[value:end] = data
    else:
        del buffer[value:]
        if value > len(buffer):
            buffer.extend(bytes(value - len(buffer)))


def _size_after(size: int, ops: list[_Op]) -> int:
    for kind, value, data in ops:
        size = max(size, value + len(data)) if kind == "w" else value
    return size


class _Dir:
    __slots__ = ("durable", "entries", "mtime_s")

    def __init__(self, mtime_s: float) -> None:
        self.entries: dict[str, _Inode | _Dir] = {}
        self.durable: dict[str, _Inode | _Dir] = {}
        self.mtime_s = mtime_s


class SimFile:
    """An open file of a SimFileSystem (storage_engine.fs.FileHandle)."""

    __slots__ = ("_fs", "_generation", "_inode", "path")

    def __init__(self, fs: SimFileSystem, inode: _Inode, path: Path) -> None:
        self._fs = fs
        self._inode = inode
        self._generation = fs.generation
        self.path = path

    def _live(self) -> _Inode:
        if self._generation != self._fs.generation:
            raise OSError(errno.EBADF, "handle of a crashed process", str(self.path))
        return self._inode

    def size_bytes(self) -> int:
        return self._live().size

    def truncate(self, size_bytes: int) -> None:
        inode = self._live()
        inode.truncate(size_bytes)
        inode.mtime_s = self._fs.now_s()

    def write_at(self, data: bytes | memoryview, position: int) -> int:
        inode = self._live()
        inode.write(bytes(data), position)
        inode.mtime_s = self._fs.now_s()
        return len(data)

    def read_at(self, position: int, size_bytes: int) -> bytes:
        inode = self._live()
        return bytes(inode.content[position:min(position + size_bytes, inode.size)])

    def sync(self, *, data_only: bool) -> None:
        inode = self._live()
        self._fs.before_sync(self.path, inode)
        inode.make_durable()

    def map_readonly(self, size_bytes: int) -> memoryview:
        inode = self._live()
        assert len(inode.content) >= size_bytes, (self.path, len(inode.content), size_bytes)
        return memoryview(inode.content)[:size_bytes].toreadonly()

    def release_pages(self, view: memoryview, size_bytes: int) -> None:
        pass  # nothing is resident apart from the inode's bytes, which must stay

    def unmap(self, view: memoryview) -> None:
        # BufferError: a slice of it is still held: the GC releases it later
        with contextlib.suppress(BufferError):
            view.release()

    def data_end(self, size_bytes: int) -> int:
        return min(self._live().size, size_bytes)

    def close(self) -> None:
        pass


class _SimLock:
    __slots__ = ("_fs", "_generation", "_key")

    def __init__(self, fs: SimFileSystem, key: str) -> None:
        self._fs = fs
        self._key = key
        self._generation = fs.generation

    def release(self) -> None:
        if self._generation == self._fs.generation:
            self._fs.locks.discard(self._key)


class SimFileSystem:
    """One machine's disk, in memory (storage_engine.fs.FileSystem). Not thread-safe: the
    simulator is one thread."""

    def __init__(self, rng: random.Random, faults: SimDiskFaults = SimDiskFaults(), *,
                 clock_ms: Callable[[], int] = lambda: 0,
                 sync_failure_allowed: Callable[[], bool] = lambda: True) -> None:
        self.rng = rng
        self.faults = faults
        # asked once a sync failure is drawn (so the draws stay the same): False, it succeeds
        self._sync_failure_allowed = sync_failure_allowed
        self._clock_ms = clock_ms
        self.root = _Dir(0.0)
        self.root.durable = self.root.entries  # the root always exists
        self.generation = 0  # +1 per crash: handles and locks of the old process die
        self.locks: set[str] = set()
        self.stats = SimDiskStats()
        self._failing_syncs = 0

    def now_s(self) -> float:
        return self._clock_ms() / 1000.0

    # -- faults -----------------------------------------------------------------------------
    def fail_next_syncs(self, count: int) -> None:
        """The next `count` syncs (file or directory) fail with EIO."""
        self._failing_syncs = count

    def before_sync(self, path: Path, inode: _Inode | None) -> None:
        """Count a sync; raise EIO when it fails (dropping what it should have written)."""
        self.stats.syncs += 1
        failing = self._failing_syncs > 0
        if failing:
            self._failing_syncs -= 1
        elif self.faults.sync_failure_probability:
            failing = (self.rng.random() < self.faults.sync_failure_probability
                       and self._sync_failure_allowed())
        if failing:
            self.stats.sync_failures += 1
            if inode is not None:  # fsyncgate: the dirty pages are marked clean, not written
                inode.pending = []
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))

    def crash(self) -> SimDiskStats:
        """A power cut (see the module docstring); returns the running stats."""
        self.generation += 1
        self.locks.clear()
        self.stats.crashes += 1
        self.root = self._recover_dir(self.root)
        self.root.durable = self.root.entries
        return self.stats

    def _recover_dir(self, directory: _Dir) -> _Dir:
        fresh = _Dir(directory.mtime_s)
        self.stats.entries_lost += len(set(directory.entries) ^ set(directory.durable))
        for name in sorted(directory.durable):  # sorted: the rng draws in a fixed order
            child = directory.durable[name]
            if isinstance(child, _Dir):
                fresh.entries[name] = self._recover_dir(child)
            else:
                fresh.entries[name] = self._recover_file(child)
        fresh.durable = dict(fresh.entries)
        return fresh

    def _recover_file(self, inode: _Inode) -> _Inode:
        content = bytearray(inode.durable)
        pending = inode.pending
        kept = 0
        if pending and self.rng.random() < self.faults.torn_write_probability:
            kept = self.rng.randint(1, len(pending))
        ops = list(pending[:kept])
        if ops and ops[-1][0] == "w":  # the last surviving write is torn at a random byte
            kind, position, data = ops[-1]
            cut = self.rng.randint(0, len(data))
            if cut < len(data):
                self.stats.torn_writes += 1
            ops[-1] = (kind, position, data[:cut])
        for kind, value, data in ops:
            _apply(content, kind, value, data)
        size = _size_after(inode.durable_size, ops)
        del content[size:]
        written = [(position, len(data)) for kind, position, data in ops
                   if kind == "w" and data and position < size]
        if written and self.rng.random() < self.faults.bit_flip_probability:
            position, length = self.rng.choice(written)
            at = self.rng.randrange(position, min(position + length, size))
            content[at] ^= 1 << self.rng.randrange(8)
            self.stats.bits_flipped += 1
        self.stats.unsynced_bytes_dropped += sum(len(d) for k, _, d in pending if k == "w") - sum(
            len(d) for k, _, d in ops if k == "w")
        return _Inode(content, size, inode.mtime_s)

    # -- paths ------------------------------------------------------------------------------
    @staticmethod
    def _parts(path: Path | str) -> tuple[str, ...]:
        parts = path.parts if isinstance(path, PurePath) else PurePosixPath(path).parts
        assert parts and parts[0] == "/", path
        return parts[1:]

    def _walk(self, parts: tuple[str, ...]) -> _Inode | _Dir | None:
        node: _Inode | _Dir = self.root
        for part in parts:
            if not isinstance(node, _Dir):
                return None
            found = node.entries.get(part)
            if found is None:
                return None
            node = found
        return node

    def _lookup(self, path: Path | str) -> _Inode | _Dir | None:
        return self._walk(self._parts(path))

    def _parent(self, path: Path | str) -> tuple[_Dir, str]:
        parts = self._parts(path)
        parent = self._walk(parts[:-1])
        if not isinstance(parent, _Dir):
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
        return parent, parts[-1]

    # -- storage_engine.fs.FileSystem ---------------------------------------------------------
    def open(self, path: Path, *, create: bool, mode: int = 0o644) -> SimFile:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if node is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
            node = parent.entries[name] = _Inode(bytearray(), 0, self.now_s())
        return SimFile(self, node, path)

    def read_bytes(self, path: Path) -> bytes:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        if isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        return bytes(node.content[:node.size])

    def exists(self, path: Path) -> bool:
        return self._lookup(path) is not None

    def is_dir(self, path: Path) -> bool:
        return isinstance(self._lookup(path), _Dir)

    def make_dirs(self, path: Path) -> None:
        node = self.root
        for part in self._parts(path):
            child = node.entries.get(part)
            if child is None:
                child = node.entries[part] = _Dir(self.now_s())
            if not isinstance(child, _Dir):
                raise FileExistsError(errno.EEXIST, "a file is in the way", str(path))
            node = child

    def list_dir(self, path: Path) -> list[str]:
        node = self._lookup(path)
        if not isinstance(node, _Dir):
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
        return list(node.entries)

    def remove(self, path: Path) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        parent.entries.pop(name, None)

    def remove_tree(self, path: Path) -> None:
        try:
            parent, name = self._parent(path)
        except FileNotFoundError:
            return
        parent.entries.pop(name, None)

    def rename(self, source: Path, target: Path) -> None:
        source_parent, source_name = self._parent(source)
        node = source_parent.entries.get(source_name)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(source))
        target_parent, target_name = self._parent(target)
        del source_parent.entries[source_name]
        target_parent.entries[target_name] = node

    def sync_directory(self, path: Path) -> None:
        node = self._lookup(path)
        if not isinstance(node, _Dir):
            raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
        self.before_sync(path, None)
        node.durable = dict(node.entries)

    def lock(self, path: Path) -> _SimLock:
        key = str(PurePosixPath(path))
        if key in self.locks:
            raise BlockingIOError(errno.EWOULDBLOCK, "locked", key)
        self.open(path, create=True)
        self.locks.add(key)
        return _SimLock(self, key)

    def mtime_s(self, path: Path) -> float:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
        return node.mtime_s

    def disk_used_ratio(self, path: Path) -> float:
        return 0.0

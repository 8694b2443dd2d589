"""A FUSE file system that keeps data not yet fsynced in memory and can lose it: power loss.

    python -m tests.support.lazyfs BACKING_DIR MOUNT_DIR     (foreground; root; fuse3)
        touch BACKING_DIR.power-loss   power loss: every write not fsynced since is forgotten
                  (the files read as their last fsynced bytes again; a size grown by lost
                  writes shrinks back); the file is removed once done (`power_loss(backing)`)
        fusermount3 -u MOUNT_DIR       unmount; what is pending is then written (a clean
                  shutdown: an OS flushes its page cache too), and the process exits
(A control file, not a signal: the main thread sits in libfuse's loop, where Python signal
handlers never run.)

The idea of Jepsen's LazyFS (used for the NATS 2.12.1 analysis): a store's files live on MOUNT,
a pass-through to BACKING where `write` only changes an in-memory copy of the touched 4 KiB pages
and `fsync`/`fdatasync` of a file writes its pages to BACKING and fsyncs them there. A process
that fsyncs before it acknowledges loses nothing acknowledged to a SIGUSR1; one that
acknowledges earlier does. Reads (also through mmap: FUSE serves page faults with `read`) see
the pending pages. What is simplified: metadata (create, mkdir, rename, unlink, truncate,
chmod) reaches BACKING at once, as on a file system that journals metadata synchronously, so
only file data is lost, never a rename or a new file (LazyFS can lose those too).

Limits: pages held per file and in total are bounded by PENDING_BYTES_MAX (past it a write
fails with ENOSPC: the store then fail-stops, a visible outcome, never silent loss).
mfusepy (ctypes over libfuse 3, the Debian `fuse3` package) is the binding.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import threading
import time
from typing import Any

try:
    import mfusepy
    _BINDING_ERROR: str | None = None
except (ImportError, OSError) as err:  # no mfusepy, or no libfuse (Debian's fuse3) to load
    _BINDING_ERROR = f"the FUSE binding cannot load: {err}"

__all__ = ["LazyFS", "control_file", "fuse_unavailable_reason", "main", "power_loss"]

PAGE_BYTES = 4096
PENDING_BYTES_MAX = 256 << 20


class LazyFS(mfusepy.Operations if _BINDING_ERROR is None else object):  # type: ignore[misc]
    use_ns = True

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self._lock = threading.RLock()
        self._pages: dict[str, dict[int, bytearray]] = {}  # path -> page index -> bytes
        self._sizes: dict[str, int] = {}  # path -> size including pending writes
        self._fds: dict[int, int] = {}  # our handle -> backing fd (fh is the backing fd)
        self.power_losses = 0

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    # -- the fault --------------------------------------------------------------------------
    def power_loss(self) -> tuple[int, int]:
        """Forget every pending write; returns (pages, files) forgotten."""
        with self._lock:
            dropped = (sum(len(pages) for pages in self._pages.values()), len(self._pages))
            self._pages.clear()
            self._sizes.clear()
            self.power_losses += 1
            return dropped

    def flush_all(self) -> None:
        with self._lock:
            for path in list(self._pages):
                self._write_back(path)

    def _pending_bytes(self) -> int:
        return sum(len(pages) for pages in self._pages.values()) * PAGE_BYTES

    # -- data -------------------------------------------------------------------------------
    def _page(self, path: str, fd: int, index: int) -> bytearray:
        pages = self._pages.setdefault(path, {})
        page = pages.get(index)
        if page is None:
            page = bytearray(os.pread(fd, PAGE_BYTES, index * PAGE_BYTES).ljust(PAGE_BYTES,
                                                                                b"\0"))
            pages[index] = page
        return page

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._lock:
            if self._pending_bytes() + len(data) + 2 * PAGE_BYTES > PENDING_BYTES_MAX:
                raise mfusepy.FuseOSError(errno.ENOSPC)
            cursor = 0
            while cursor < len(data):
                index, start = divmod(offset + cursor, PAGE_BYTES)
                chunk = min(PAGE_BYTES - start, len(data) - cursor)
                self._page(path, fh, index)[start:start + chunk] = data[cursor:cursor + chunk]
                cursor += chunk
            size = self._sizes.get(path, os.fstat(fh).st_size)
            self._sizes[path] = max(size, offset + len(data))
            return len(data)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._lock:
            end = min(offset + size, self._sizes.get(path, os.fstat(fh).st_size))
            if end <= offset:
                return b""
            pages = self._pages.get(path)
            if not pages:
                return os.pread(fh, end - offset, offset)
            out = bytearray()
            cursor = offset
            while cursor < end:
                index, start = divmod(cursor, PAGE_BYTES)
                chunk = min(PAGE_BYTES - start, end - cursor)
                page = pages.get(index)
                if page is not None:
                    out += page[start:start + chunk]
                else:
                    out += os.pread(fh, chunk, cursor).ljust(chunk, b"\0")
                cursor += chunk
            return bytes(out)

    def _write_back(self, path: str) -> None:
        pages = self._pages.pop(path, None)
        size = self._sizes.pop(path, None)
        if not pages and size is None:
            return
        fd = os.open(self._real(path), os.O_WRONLY)
        try:
            if size is not None and os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            for index, page in sorted((pages or {}).items()):
                start = index * PAGE_BYTES
                length = min(PAGE_BYTES, (size if size is not None else start + PAGE_BYTES)
                             - start)
                if length > 0:
                    os.pwrite(fd, bytes(page[:length]), start)
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._lock:
            self._write_back(path)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() is not a sync

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._lock:
            pages = self._pages.get(path)
            if pages:
                last = (length + PAGE_BYTES - 1) // PAGE_BYTES
                for index in [i for i in pages if i >= last]:
                    del pages[index]
                if length % PAGE_BYTES and (length // PAGE_BYTES) in pages:
                    pages[length // PAGE_BYTES][length % PAGE_BYTES:] = bytes(
                        PAGE_BYTES - length % PAGE_BYTES)
            self._sizes.pop(path, None)
            os.truncate(self._real(path), length)
        return 0

    # -- files and metadata (straight to the backing directory) -----------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.lstat(self._real(path))
        attrs = {key: getattr(st, key) for key in (
            "st_mode", "st_nlink", "st_uid", "st_gid", "st_size")}
        # use_ns: times in nanoseconds (seconds here read as 1970: the store's retention then
        # took every sealed segment for 55 years old and deleted it)
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        with self._lock:
            if path in self._sizes:
                attrs["st_size"] = self._sizes[path]
        return attrs

    def open(self, path: str, flags: int) -> int:
        if flags & os.O_ACCMODE != os.O_RDONLY:  # pages are read in before a write
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        with self._lock:
            if flags & os.O_TRUNC:
                self._pages.pop(path, None)
                self._sizes.pop(path, None)
            return os.open(self._real(path), flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        with self._lock:
            self._pages.pop(path, None)
            self._sizes.pop(path, None)
            os.unlink(self._real(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._lock:
            os.rename(self._real(old), self._real(new))
            self._pages.pop(new, None)
            self._sizes.pop(new, None)
            if old in self._pages:
                self._pages[new] = self._pages.pop(old)
            if old in self._sizes:
                self._sizes[new] = self._sizes.pop(old)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._real(path), ns=times) if times else os.utime(self._real(path))
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0  # metadata is durable at once (module docstring)

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise mfusepy.FuseOSError(errno.EACCES)
        return 0


CONTROL_POLL_S = 0.02


def fuse_unavailable_reason() -> str | None:
    """Why a LazyFS cannot be mounted here (None: it can)."""
    if _BINDING_ERROR is not None:
        return _BINDING_ERROR
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        return "FUSE needs root and /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "fusermount3 missing (Debian package fuse3)"
    return None


def control_file(backing: str) -> str:
    return os.path.realpath(backing) + ".power-loss"


def power_loss(backing: str, timeout_s: float = 10.0) -> tuple[int, int]:
    """Make the LazyFS serving `backing` lose what is not fsynced; returns once it did, with
    the (pages, files) it forgot (read from `<backing>.power-loss.done`)."""
    trigger = control_file(backing)
    done = trigger + ".done"
    if os.path.exists(done):
        os.unlink(done)
    with open(trigger, "w"):
        pass
    deadline = time.monotonic() + timeout_s
    while os.path.exists(trigger) or not os.path.exists(done):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no LazyFS took {trigger} within {timeout_s} s")
        time.sleep(CONTROL_POLL_S)
    with open(done) as reply:
        pages, files = (int(part) for part in reply.read().split())
    return pages, files


def _watch(operations: LazyFS, stop: threading.Event) -> None:
    trigger = control_file(operations.backing)
    while not stop.wait(CONTROL_POLL_S):
        if os.path.exists(trigger):
            pages, files = operations.power_loss()
            with open(trigger + ".done.tmp", "w") as out:
                out.write(f"{pages} {files}\n")
            os.replace(trigger + ".done.tmp", trigger + ".done")
            os.unlink(trigger)


def main(argv: list[str]) -> None:
    backing, mountpoint = argv
    operations = LazyFS(backing)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(operations, stop), daemon=True)
    watcher.start()
    try:
        mfusepy.FUSE(operations, mountpoint, foreground=True, nothreads=False)
    finally:
        stop.set()
        operations.flush_all()


if __name__ == "__main__":
    main(sys.argv[1:])

"""FileIO: the object-store operations tiered storage needs, over fsspec, for one tier URL.

Modelled on pyiceberg's FileIO: a scheme table picks the fsspec filesystem; the object holds
only plain values (the URL and a frozen `FileIOOptions`), so it pickles to Spark executors and
each process creates its own filesystem lazily (after a fork too).

    scheme        filesystem              atomic write                   create-only write
    file://       fsspec LocalFileSystem  temp sibling + fsync + rename  link(temp, final)
    s3://, s3a:// s3fs.S3FileSystem       one PUT or a completed         PUT If-None-Match: *
                                          multipart upload
    memory://     fsspec MemoryFileSystem one assignment                 check under a lock

Why these are safe: on S3 an object appears whole or not at all (a single PUT, or a multipart
upload once CompleteMultipartUpload succeeds); an aborted stream calls `discard()`, which
aborts the multipart upload, so no partial object is ever created under a final key. Local
files get the same property from rename. Create-only writes are how manifest versions are
committed (manifest.py): two writers racing for version N cannot both win.

Keys are '/'-separated and relative to the URL (`broker-a/segments/000...0.seg`). Every call
maps failures to the TieredStorageError tree with the URL, key and operation in the message.
S3 options: `endpoint_url`, `region`, `key`/`secret` (empty: botocore's usual chain — the
AWS_* environment variables, profile, instance role), connect/read timeouts of
tieredRequestTimeoutMs and a bounded number of botocore attempts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import fsspec

from storage_engine.config import TieredStoreConfig
from storage_engine.files import fsync_directory
from storage_engine.tiered.errors import (
    TierAccessDeniedError,
    TieredStorageError,
    TierNotFoundError,
    TierTimeoutError,
    TierVerifyError,
)
from storage_engine.tiered.policy import TEMP_MARKER

__all__ = ["FileIO", "FileIOOptions", "resolve_tier_url"]

S3_ATTEMPTS_MAX = 2  # botocore attempts per request (the uploader retries with its own backoff)
S3FS_ATTEMPTS_MAX = 1  # s3fs attempts around those: a dead endpoint costs ~2 request timeouts
VERIFY_CHUNK_BYTES = 4 << 20
_MEMORY_LOCK = threading.Lock()


def resolve_tier_url(config: TieredStoreConfig, store_dir: str | Path) -> str:
    """tieredStoreUrl, or its default `file://<storePathRootDir>/tier`."""
    if config.url:
        return config.url.rstrip("/")
    return f"file://{Path(store_dir).resolve() / 'tier'}"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FileIOOptions:
    """Plain, picklable options of a FileIO (no secrets in repr)."""

    request_timeout_s: float = 10.0
    s3_endpoint_url: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = dataclasses.field(default="", repr=False)

    @classmethod
    def from_config(cls, config: TieredStoreConfig) -> FileIOOptions:
        return cls(request_timeout_s=config.request_timeout_s,
                   s3_endpoint_url=config.s3_endpoint_url, s3_region=config.s3_region,
                   s3_access_key_id=config.s3_access_key_id,
                   s3_secret_access_key=config.s3_secret_access_key)


def _local_fs(options: FileIOOptions) -> Any:
    return fsspec.filesystem("file", skip_instance_cache=True)


def _memory_fs(options: FileIOOptions) -> Any:
    return fsspec.filesystem("memory")


def _s3_fs(options: FileIOOptions) -> Any:
    timeout = options.request_timeout_s
    kwargs: dict[str, Any] = {
        "skip_instance_cache": True,
        "use_listings_cache": False,
        "config_kwargs": {"connect_timeout": timeout, "read_timeout": timeout,
                          "retries": {"max_attempts": S3_ATTEMPTS_MAX, "mode": "standard"}},
    }
    if options.s3_endpoint_url:
        kwargs["endpoint_url"] = options.s3_endpoint_url
    if options.s3_region:
        kwargs["client_kwargs"] = {"region_name": options.s3_region}
    if options.s3_access_key_id:
        kwargs["key"] = options.s3_access_key_id
        kwargs["secret"] = options.s3_secret_access_key
    fs = fsspec.filesystem("s3", **kwargs)
    fs.retries = S3FS_ATTEMPTS_MAX  # s3fs's own retry loop (class default 5, with sleeps)
    return fs


_FILESYSTEMS = {"file": _local_fs, "memory": _memory_fs, "s3": _s3_fs, "s3a": _s3_fs}


class FileIO:
    """Object IO under one URL. Thread-safe; picklable (the filesystem is rebuilt per process)."""

    def __init__(self, url: str, options: FileIOOptions | None = None) -> None:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in _FILESYSTEMS:
            raise TieredStorageError(f"unsupported tier URL (schemes: {sorted(_FILESYSTEMS)})",
                                     url=url, operation="open")
        if scheme in ("s3", "s3a") and importlib.util.find_spec("s3fs") is None:
            raise TieredStorageError("s3fs is not installed: pip install 'rocketha[s3]'",
                                     url=url, operation="open")
        self.url = url.rstrip("/")
        self.scheme = scheme
        self.options = options or FileIOOptions()
        self._root = rest.rstrip("/") if scheme != "memory" else "/" + rest.strip("/")
        self._fs: Any = None
        self._fs_pid = -1
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["options"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"FileIO({self.url!r})"

    @property
    def is_local(self) -> bool:
        return self.scheme == "file"

    def _filesystem(self) -> Any:
        with self._lock:
            if self._fs is None or self._fs_pid != os.getpid():
                self._fs = _FILESYSTEMS[self.scheme](self.options)
                self._fs_pid = os.getpid()
            return self._fs

    def path(self, key: str) -> str:
        return f"{self._root}/{key}" if key else self._root

    @contextlib.contextmanager
    def _guard(self, operation: str, key: str) -> Iterator[None]:
        """Map any failure of the object store to the TieredStorageError tree."""
        try:
            yield
        except TieredStorageError:
            raise
        except Exception as err:  # the IO boundary: botocore/aiohttp/OS errors of every kind
            raise _classify(err, url=self.url, key=key, operation=operation) from err

    # -- reading ----------------------------------------------------------------------------
    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of an object; a short object is a TierVerifyError."""
        if end <= start:
            return b""
        with self._guard("read", key):
            data = self._filesystem().cat_file(self.path(key), start=start, end=end)
        if len(data) != end - start:
            raise TierVerifyError(f"short read: {len(data)} of {end - start} bytes at {start}",
                                  url=self.url, key=key, operation="read")
        return bytes(data)

    def read(self, key: str) -> bytes:
        with self._guard("read", key):
            return bytes(self._filesystem().cat_file(self.path(key)))

    def size(self, key: str) -> int:
        with self._guard("stat", key):
            return int(self._filesystem().info(self.path(key))["size"])

    def exists(self, key: str) -> bool:
        with self._guard("stat", key):
            return bool(self._filesystem().exists(self.path(key)))

    def list(self, prefix: str) -> list[str]:
        """Names (not keys) directly under `prefix`; [] when it does not exist."""
        with self._guard("list", prefix):
            fs = self._filesystem()
            path = self.path(prefix)
            try:
                entries = fs.ls(path, detail=False, **({"refresh": True}
                                                       if self.scheme in ("s3", "s3a") else {}))
            except FileNotFoundError:
                if self.scheme in ("s3", "s3a"):
                    self._check_bucket(fs)
                return []
        return sorted(str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries)

    def _check_bucket(self, fs: Any) -> None:
        """An S3 listing of a missing prefix is empty, of a missing bucket an error: tell them
        apart so a wrong bucket is reported instead of looking like an empty tier."""
        bucket = self._root.split("/", 1)[0]
        if not fs.exists(bucket):
            raise TierNotFoundError(f"bucket {bucket!r} does not exist", url=self.url,
                                    operation="list")

    def verify(self, key: str, size_bytes: int, sha256: str) -> None:
        """Read the object back: its size and SHA-256 must match, else TierVerifyError."""
        actual = self.size(key)
        if actual != size_bytes:
            raise TierVerifyError(f"size {actual} != {size_bytes}", url=self.url, key=key,
                                  operation="verify")
        digest = hashlib.sha256()
        position = 0
        while position < size_bytes:
            end = min(size_bytes, position + VERIFY_CHUNK_BYTES)
            digest.update(self.read_range(key, position, end))
            position = end
        if digest.hexdigest() != sha256:
            raise TierVerifyError(f"sha256 {digest.hexdigest()} != {sha256}", url=self.url,
                                  key=key, operation="verify")

    # -- writing ----------------------------------------------------------------------------
    def write_atomic(self, key: str, chunks: Iterable[bytes], *, part_bytes: int) -> int:
        """Write an object from `chunks` so that it appears whole or not at all (an exception
        from `chunks` aborts the write). Returns the bytes written."""
        with self._guard("write", key):
            if self.scheme == "file":
                return self._write_local(Path(self.path(key)), chunks)
            fs = self._filesystem()
            handle = fs.open(self.path(key), "wb", block_size=max(part_bytes, 5 << 20))
            written = 0
            try:
                for chunk in chunks:
                    handle.write(chunk)
                    written += len(chunk)
            except BaseException:
                handle.discard()  # aborts a multipart upload; nothing becomes visible
                handle.closed = True
                raise
            handle.close()
            return written

    def _write_local(self, final: Path, chunks: Iterable[bytes]) -> int:
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f"{final.name}{TEMP_MARKER}{uuid.uuid4().hex[:12]}")
        written = 0
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
                written += len(chunk)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            temp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(temp, final)
        fsync_directory(final.parent)
        return written

    def write_if_absent(self, key: str, data: bytes) -> bool:
        """Create an object only if none exists under `key` (True), else leave it (False)."""
        with self._guard("create", key):
            if self.scheme == "file":
                return self._create_local(Path(self.path(key)), data)
            fs = self._filesystem()
            if self.scheme == "memory":
                with _MEMORY_LOCK:
                    if fs.exists(self.path(key)):
                        return False
                    fs.pipe_file(self.path(key), data)
                    return True
            try:
                fs.pipe_file(self.path(key), data, mode="create")
            except FileExistsError:
                return False
            return True

    def _create_local(self, final: Path, data: bytes) -> bool:
        final.parent.mkdir(parents=True, exist_ok=True)
        temp = final.with_name(f"{final.name}{TEMP_MARKER}{uuid.uuid4().hex[:12]}")
        self._write_local(temp, [data])
        try:
            os.link(temp, final)  # fails if `final` exists: the create-only commit
        except FileExistsError:
            return False
        finally:
            temp.unlink(missing_ok=True)
        fsync_directory(final.parent)
        return True

    def delete(self, key: str) -> None:
        """Remove an object; a missing one is not an error."""
        with self._guard("delete", key):
            fs = self._filesystem()
            try:
                fs.rm_file(self.path(key))
            except FileNotFoundError:
                return

    def delete_tree(self, prefix: str) -> bool:
        """Remove every object under `prefix` (a directory, recursively); whether there was
        any. An empty prefix (the whole root) is refused: callers name what they remove."""
        if not prefix.strip("/"):
            raise ValueError("delete_tree needs a non-empty prefix")
        with self._guard("delete", prefix):
            fs = self._filesystem()
            path = self.path(prefix.strip("/"))
            if self.scheme in ("s3", "s3a"):
                fs.invalidate_cache(path)
            if not fs.exists(path):
                return False
            fs.rm(path, recursive=True)
            return True

    def ensure_root(self) -> None:
        """Create the local root directory (S3 buckets are the operator's job)."""
        if self.scheme == "file":
            with self._guard("mkdir", ""):
                Path(self._root).mkdir(parents=True, exist_ok=True)


def _classify(err: Exception, *, url: str, key: str, operation: str) -> TieredStorageError:
    text = f"{type(err).__name__}: {err}"
    name = type(err).__name__
    if isinstance(err, PermissionError) or "AccessDenied" in text or "InvalidAccessKeyId" in text \
            or "SignatureDoesNotMatch" in text or "Forbidden" in text:
        return TierAccessDeniedError(text, url=url, key=key, operation=operation)
    if isinstance(err, FileNotFoundError) or "NoSuchBucket" in text:
        return TierNotFoundError(text, url=url, key=key, operation=operation)
    if isinstance(err, TimeoutError) or "Timeout" in name or "timed out" in text:
        return TierTimeoutError(text, url=url, key=key, operation=operation)
    return TieredStorageError(text, url=url, key=key, operation=operation)

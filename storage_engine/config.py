"""StoreConfig: every limit of the storage engine, with its unit in the name.

Field names are ours (snake_case, units last); `from_properties()` maps RocketMQ's parameter
names (`mappedFileSizeCommitLog`, `flushDiskType`, ...) onto them, so broker .conf files keep
RocketMQ's vocabulary. Relationships between limits are asserted once, here.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from conf import parse_bool
from storage_engine.errors import ConfigError

__all__ = [
    "STORE_PROPERTY_KEYS",
    "FlushDiskType",
    "StoreConfig",
    "TieredStoreConfig",
]

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
CONSUME_QUEUE_ENTRY_SIZE_BYTES = 20
BLANK_RECORD_SIZE_BYTES = 8
PROPERTIES_SIZE_MAX_BYTES = 32767  # Java Short.MAX_VALUE: the properties length is a 2-byte short


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """Limits and policies of one store directory. Defaults follow RocketMQ's MessageStoreConfig."""

    commit_log_segment_size_bytes: int = GiB  # mappedFileSizeCommitLog
    consume_queue_segment_entries: int = 300_000  # mappedFileSizeConsumeQueue / 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_ms: int = 500  # flushIntervalCommitLog (ASYNC_FLUSH)
    sync_flush_timeout_ms: int = 5000  # syncFlushTimeout (SYNC_FLUSH group commit deadline)
    checkpoint_interval_ms: int = 1000  # how often the flush thread writes the checkpoint
    message_size_max_bytes: int = 4 * MiB  # maxMessageSize: the body limit
    batch_messages_max: int = 65536  # one put_messages call
    file_reserved_time_hours: float = 72.0  # fileReservedTime
    disk_max_used_space_ratio: float = 0.75  # diskMaxUsedSpaceRatio (RocketMQ: percent)
    delete_segments_per_pass_max: int = 10  # deleteFileBatchMax
    clean_resource_interval_ms: int = 10_000  # cleanResourceInterval: retention pass period
    read_messages_max: int = 4096  # one get_messages call, whatever the caller asks
    read_bytes_max: int = 64 * MiB
    consume_queue_tail_scan_entries_max: int = 1 << 20  # a sanity bound for visibility scans
    # Mapped pages kept resident behind each write end; older flushed ones are released
    # (segment.py: resident pages) and fault back from the page cache when read again.
    commit_log_resident_window_bytes: int = 8 * MiB  # commitLogResidentWindowBytes
    consume_queue_resident_window_bytes: int = 256 * 1024  # consumeQueueResidentWindowBytes (each)
    tiered: TieredStoreConfig = dataclasses.field(default_factory=lambda: TieredStoreConfig())

    def __post_init__(self) -> None:
        _check_range("commit_log_segment_size_bytes", self.commit_log_segment_size_bytes,
                     4096, 1 << 40)
        if self.commit_log_segment_size_bytes < self.message_size_max_bytes + 64 * 1024 + 8:
            raise ConfigError(
                "commit_log_segment_size_bytes",
                f"{self.commit_log_segment_size_bytes} cannot hold one message of "
                f"message_size_max_bytes={self.message_size_max_bytes} plus headers",
            )
        _check_range("consume_queue_segment_entries", self.consume_queue_segment_entries,
                     16, 1 << 26)
        if not isinstance(self.flush_disk_type, FlushDiskType):
            raise ConfigError("flush_disk_type", f"not a FlushDiskType: {self.flush_disk_type!r}")
        _check_range("flush_interval_ms", self.flush_interval_ms, 1, 3_600_000)
        _check_range("sync_flush_timeout_ms", self.sync_flush_timeout_ms, 1, 3_600_000)
        _check_range("checkpoint_interval_ms", self.checkpoint_interval_ms, 1, 3_600_000)
        _check_range("message_size_max_bytes", self.message_size_max_bytes, 1, 1 << 30)
        _check_range("batch_messages_max", self.batch_messages_max, 1, 1 << 24)
        _check_range("delete_segments_per_pass_max", self.delete_segments_per_pass_max, 1, 10_000)
        _check_range("clean_resource_interval_ms", self.clean_resource_interval_ms, 10,
                     24 * 3_600_000)
        _check_range("read_messages_max", self.read_messages_max, 1, 1 << 24)
        _check_range("read_bytes_max", self.read_bytes_max, 1024, 1 << 31)
        _check_range("consume_queue_tail_scan_entries_max",
                     self.consume_queue_tail_scan_entries_max, 1, 1 << 30)
        _check_range("commit_log_resident_window_bytes", self.commit_log_resident_window_bytes,
                     0, 1 << 40)
        _check_range("consume_queue_resident_window_bytes",
                     self.consume_queue_resident_window_bytes, 0, 1 << 40)
        if not 0 <= self.file_reserved_time_hours <= 24 * 365 * 100:
            raise ConfigError("file_reserved_time_hours",
                              f"out of range: {self.file_reserved_time_hours}")
        if not 0.1 <= self.disk_max_used_space_ratio <= 0.95:
            raise ConfigError(
                "disk_max_used_space_ratio",
                f"{self.disk_max_used_space_ratio} not in [0.1, 0.95] (RocketMQ clamps 10-95 %)",
            )

    @property
    def consume_queue_segment_size_bytes(self) -> int:
        return self.consume_queue_segment_entries * CONSUME_QUEUE_ENTRY_SIZE_BYTES

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> StoreConfig:
        """Build from RocketMQ-named keys (values as strings). Unknown keys are the caller's
        business: this reads only the keys in STORE_PROPERTY_KEYS."""
        kwargs: dict[str, Any] = {"tiered": TieredStoreConfig.from_properties(properties)}
        for key, (field, parse) in _PROPERTY_MAP.items():
            if key in properties:
                try:
                    kwargs[field] = parse(properties[key])
                except (ValueError, KeyError) as err:
                    raise ConfigError(key, f"bad value {properties[key]!r}: {err}") from err
        try:
            return cls(**kwargs)
        except ConfigError as err:
            rocketmq_key = _FIELD_TO_KEY.get(err.key, err.key)
            raise ConfigError(rocketmq_key, str(err).split(": ", 1)[-1]) from err


def _check_range(key: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConfigError(key, f"{value!r} not an integer in [{low}, {high}]")


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_percent(text: str) -> float:
    return float(text.strip()) / 100.0


def _parse_flush_disk_type(text: str) -> FlushDiskType:
    try:
        return FlushDiskType[text.strip()]
    except KeyError:
        raise ValueError(f"expected one of {[kind.name for kind in FlushDiskType]}") from None


_PROPERTY_MAP: dict[str, tuple[str, Any]] = {
    "mappedFileSizeCommitLog": ("commit_log_segment_size_bytes", _parse_int),
    "mappedFileSizeConsumeQueue": (
        "consume_queue_segment_entries",
        lambda text: _parse_int(text) // CONSUME_QUEUE_ENTRY_SIZE_BYTES,
    ),
    "flushDiskType": ("flush_disk_type", lambda text: _parse_flush_disk_type(text)),
    "flushIntervalCommitLog": ("flush_interval_ms", _parse_int),
    "syncFlushTimeout": ("sync_flush_timeout_ms", _parse_int),
    "maxMessageSize": ("message_size_max_bytes", _parse_int),
    "fileReservedTime": ("file_reserved_time_hours", lambda text: float(text.strip())),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", _parse_percent),
    "deleteFileBatchMax": ("delete_segments_per_pass_max", _parse_int),
    "cleanResourceInterval": ("clean_resource_interval_ms", _parse_int),
    "commitLogResidentWindowBytes": ("commit_log_resident_window_bytes", _parse_int),
    "consumeQueueResidentWindowBytes": ("consume_queue_resident_window_bytes", _parse_int),
}
_FIELD_TO_KEY = {field: key for key, (field, _) in _PROPERTY_MAP.items()}


# -- tiered storage (storage_engine.tiered) -------------------------------------------------------
TIERED_URL_SCHEMES = frozenset({"file", "s3", "s3a", "memory"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TieredStoreConfig:
    """Tiered storage: where sealed segments go, how fast, and how cold reads are cached.

    `url` "" means `file://<storePathRootDir>/tier` (resolved by whoever knows the store
    directory). S3 credentials left empty come from the usual AWS environment (variables,
    profile, instance role), as botocore resolves them.
    """

    enabled: bool = False  # tieredStoreEnable
    url: str = ""  # tieredStoreUrl
    file_reserved_time_hours: float = 72.0  # tieredStoreFileReservedTime (tier retention)
    upload_bytes_per_sec_max: int = 64 * MiB  # tieredUploadBytesPerSecMax (all uploads together)
    upload_concurrency: int = 2  # tieredUploadConcurrency (segments uploading at once)
    upload_chunk_bytes: int = MiB  # tieredUploadChunkBytes (one write; the throttle's step)
    upload_delay_ms: int = 0  # tieredUploadDelayMs (a sealed segment's minimum age)
    upload_interval_ms: int = 1000  # tieredUploadIntervalMs (how often to look for work)
    upload_retry_backoff_min_ms: int = 1000  # tieredUploadRetryBackoffMinMs
    upload_retry_backoff_max_ms: int = 60_000  # tieredUploadRetryBackoffMaxMs
    retention_interval_ms: int = 10_000  # tieredRetentionIntervalMs (local and tier passes)
    manifest_refresh_interval_ms: int = 5000  # tieredManifestRefreshIntervalMs (readers)
    manifest_versions_kept: int = 8  # tieredManifestVersionsKept
    manifest_segments_max: int = 200_000  # tieredManifestSegmentsMax
    read_block_bytes: int = MiB  # tieredReadBlockBytes (cache unit, ranged-read granularity)
    read_ahead_blocks: int = 4  # tieredReadAheadBlocks (fetched with a missed block)
    read_cache_bytes_max: int = 64 * MiB  # tieredReadCacheBytesMax
    request_timeout_ms: int = 10_000  # tieredRequestTimeoutMs (connect and read, each)
    s3_endpoint_url: str = ""  # tieredS3EndpointUrl
    s3_region: str = ""  # tieredS3Region
    s3_access_key_id: str = ""  # tieredS3AccessKeyId
    s3_secret_access_key: str = dataclasses.field(default="", repr=False)  # tieredS3SecretAccessKey

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError("enabled", f"not a bool: {self.enabled!r}")
        if self.url:
            scheme = self.url.split("://", 1)[0] if "://" in self.url else ""
            if scheme not in TIERED_URL_SCHEMES:
                raise ConfigError("url", f"{self.url!r}: scheme must be one of "
                                  f"{sorted(TIERED_URL_SCHEMES)} (e.g. s3://bucket/prefix)")
            if scheme in ("s3", "s3a") and not self.url.split("://", 1)[1].strip("/"):
                raise ConfigError("url", f"{self.url!r} names no bucket")
        if not 0 < self.file_reserved_time_hours <= 24 * 365 * 100:
            raise ConfigError("file_reserved_time_hours",
                              f"out of range: {self.file_reserved_time_hours}")
        _check_range("upload_bytes_per_sec_max", self.upload_bytes_per_sec_max, 1024, 1 << 40)
        _check_range("upload_concurrency", self.upload_concurrency, 1, 64)
        _check_range("upload_chunk_bytes", self.upload_chunk_bytes, 4096, 1 << 30)
        _check_range("upload_delay_ms", self.upload_delay_ms, 0, 1 << 40)
        _check_range("upload_interval_ms", self.upload_interval_ms, 10, 3_600_000)
        _check_range("upload_retry_backoff_min_ms", self.upload_retry_backoff_min_ms, 1,
                     3_600_000)
        _check_range("upload_retry_backoff_max_ms", self.upload_retry_backoff_max_ms,
                     self.upload_retry_backoff_min_ms, 24 * 3_600_000)
        _check_range("retention_interval_ms", self.retention_interval_ms, 10, 24 * 3_600_000)
        _check_range("manifest_refresh_interval_ms", self.manifest_refresh_interval_ms, 10,
                     3_600_000)
        _check_range("manifest_versions_kept", self.manifest_versions_kept, 2, 10_000)
        _check_range("manifest_segments_max", self.manifest_segments_max, 1, 10_000_000)
        _check_range("read_block_bytes", self.read_block_bytes, 4096, 1 << 30)
        _check_range("read_ahead_blocks", self.read_ahead_blocks, 0, 1024)
        _check_range("read_cache_bytes_max", self.read_cache_bytes_max,
                     self.read_block_bytes * (1 + self.read_ahead_blocks), 1 << 40)
        _check_range("request_timeout_ms", self.request_timeout_ms, 100, 3_600_000)
        if bool(self.s3_access_key_id) != bool(self.s3_secret_access_key):
            raise ConfigError("s3_access_key_id", "give both tieredS3AccessKeyId and "
                              "tieredS3SecretAccessKey, or neither (AWS environment)")

    @property
    def request_timeout_s(self) -> float:
        return self.request_timeout_ms / 1000.0

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> TieredStoreConfig:
        """Read the tiered* keys; errors name the RocketMQ-style key."""
        kwargs: dict[str, Any] = {}
        for key, (field, parse) in _TIERED_PROPERTY_MAP.items():
            if key in properties:
                try:
                    kwargs[field] = parse(properties[key])
                except (ValueError, KeyError) as err:
                    raise ConfigError(key, f"bad value {properties[key]!r}: {err}") from err
        try:
            return cls(**kwargs)
        except ConfigError as err:
            key = _TIERED_FIELD_TO_KEY.get(err.key, err.key)
            raise ConfigError(key, str(err).split(": ", 1)[-1]) from err


_TIERED_PROPERTY_MAP: dict[str, tuple[str, Any]] = {
    "tieredStoreEnable": ("enabled", parse_bool),
    "tieredStoreUrl": ("url", str.strip),
    "tieredStoreFileReservedTime": ("file_reserved_time_hours", lambda text: float(text)),
    "tieredUploadBytesPerSecMax": ("upload_bytes_per_sec_max", _parse_int),
    "tieredUploadConcurrency": ("upload_concurrency", _parse_int),
    "tieredUploadChunkBytes": ("upload_chunk_bytes", _parse_int),
    "tieredUploadDelayMs": ("upload_delay_ms", _parse_int),
    "tieredUploadIntervalMs": ("upload_interval_ms", _parse_int),
    "tieredUploadRetryBackoffMinMs": ("upload_retry_backoff_min_ms", _parse_int),
    "tieredUploadRetryBackoffMaxMs": ("upload_retry_backoff_max_ms", _parse_int),
    "tieredRetentionIntervalMs": ("retention_interval_ms", _parse_int),
    "tieredManifestRefreshIntervalMs": ("manifest_refresh_interval_ms", _parse_int),
    "tieredManifestVersionsKept": ("manifest_versions_kept", _parse_int),
    "tieredManifestSegmentsMax": ("manifest_segments_max", _parse_int),
    "tieredReadBlockBytes": ("read_block_bytes", _parse_int),
    "tieredReadAheadBlocks": ("read_ahead_blocks", _parse_int),
    "tieredReadCacheBytesMax": ("read_cache_bytes_max", _parse_int),
    "tieredRequestTimeoutMs": ("request_timeout_ms", _parse_int),
    "tieredS3EndpointUrl": ("s3_endpoint_url", str.strip),
    "tieredS3Region": ("s3_region", str.strip),
    "tieredS3AccessKeyId": ("s3_access_key_id", str.strip),
    "tieredS3SecretAccessKey": ("s3_secret_access_key", str.strip),
}
_TIERED_FIELD_TO_KEY = {field: key for key, (field, _) in _TIERED_PROPERTY_MAP.items()}
STORE_PROPERTY_KEYS = frozenset(_PROPERTY_MAP) | frozenset(_TIERED_PROPERTY_MAP)

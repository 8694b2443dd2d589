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

from storage_engine.errors import ConfigError

__all__ = ["FlushDiskType", "StoreConfig", "STORE_PROPERTY_KEYS"]

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
CONSUME_QUEUE_ENTRY_SIZE_BYTES = 20
BLANK_RECORD_SIZE_BYTES = 8
PROPERTIES_SIZE_MAX_BYTES = 32767  # Java Short.MAX_VALUE: the properties length is a 2-byte short
TOPIC_LENGTH_MAX = 127
QUEUE_ID_MAX = 65535


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
    read_messages_max: int = 4096  # one get_messages call, whatever the caller asks
    read_bytes_max: int = 64 * MiB
    consume_queue_tail_scan_entries_max: int = 1 << 20  # a sanity bound for visibility scans

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
        _check_range("read_messages_max", self.read_messages_max, 1, 1 << 24)
        _check_range("read_bytes_max", self.read_bytes_max, 1024, 1 << 31)
        _check_range("consume_queue_tail_scan_entries_max",
                     self.consume_queue_tail_scan_entries_max, 1, 1 << 30)
        if not 0 <= self.file_reserved_time_hours <= 24 * 365 * 100:
            raise ConfigError("file_reserved_time_hours", f"out of range: {self.file_reserved_time_hours}")
        if not 0.1 <= self.disk_max_used_space_ratio <= 0.95:
            raise ConfigError(
                "disk_max_used_space_ratio",
                f"{self.disk_max_used_space_ratio} not in [0.1, 0.95] (RocketMQ clamps 10–95 %)",
            )

    @property
    def consume_queue_segment_size_bytes(self) -> int:
        return self.consume_queue_segment_entries * CONSUME_QUEUE_ENTRY_SIZE_BYTES

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> StoreConfig:
        """Build from RocketMQ-named keys (values as strings). Unknown keys are the caller's
        business: this reads only the keys in STORE_PROPERTY_KEYS."""
        kwargs: dict[str, Any] = {}
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


_PROPERTY_MAP: dict[str, tuple[str, Any]] = {
    "mappedFileSizeCommitLog": ("commit_log_segment_size_bytes", _parse_int),
    "mappedFileSizeConsumeQueue": (
        "consume_queue_segment_entries",
        lambda text: _parse_int(text) // CONSUME_QUEUE_ENTRY_SIZE_BYTES,
    ),
    "flushDiskType": ("flush_disk_type", lambda text: FlushDiskType[text.strip()]),
    "flushIntervalCommitLog": ("flush_interval_ms", _parse_int),
    "syncFlushTimeout": ("sync_flush_timeout_ms", _parse_int),
    "maxMessageSize": ("message_size_max_bytes", _parse_int),
    "fileReservedTime": ("file_reserved_time_hours", lambda text: float(text.strip())),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", _parse_percent),
    "deleteFileBatchMax": ("delete_segments_per_pass_max", _parse_int),
}
_FIELD_TO_KEY = {field: key for key, (field, _) in _PROPERTY_MAP.items()}
STORE_PROPERTY_KEYS = frozenset(_PROPERTY_MAP)

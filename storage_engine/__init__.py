"""rocketha's storage engine: CommitLog + ConsumeQueue in RocketMQ's record layout.

The public surface; import only from here (`from storage_engine import MessageStore`).
"""

from __future__ import annotations

from storage_engine.commit_log import RecoveryScan
from storage_engine.config import STORE_PROPERTY_KEYS, FlushDiskType, StoreConfig
from storage_engine.epoch import EpochEntry, EpochFile, find_consistent_point
from storage_engine.errors import (
    ConfigError,
    CorruptFileError,
    CorruptRecordError,
    FsyncFailedError,
    InvalidNameError,
    QueueOffsetsError,
    ReplicatedDataError,
    StorageError,
    StoreFormatError,
    StoreLockedError,
    TruncateBelowConfirmError,
)
from storage_engine.files import (
    FSYNC_FAILED_EXIT_CODE,
    atomic_write_bytes,
    exit_on_fsync_failure,
    set_fsync_failure_handler,
)
from storage_engine.fs import OS_FILE_SYSTEM, FileHandle, FileLock, FileSystem, OsFileSystem
from storage_engine.message_store import MessageStore, StoreStats
from storage_engine.messages import (
    GetResult,
    Message,
    MessageBatch,
    PutResult,
    RecordBlock,
    TagFilter,
)
from storage_engine.names import check_topic_name, topic_name_error
from storage_engine.record_arrow import RECORD_ARROW_COLUMNS, block_to_arrow, records_to_arrow
from storage_engine.record_format import CRC_TAIL_SIZE_BYTES as RECORD_CHECKSUM_PAIR_BYTES
from storage_engine.record_format import HEADER as RECORD_HEADER
from storage_engine.record_format import (
    StoredMessage,
    decode_properties,
    decode_record,
    encode_properties,
    java_string_hash,
    make_msg_id,
    scan_record,
)
from storage_engine.retention import RetentionService
from storage_engine.statuses import GetStatus, PutStatus

__all__ = [
    "FSYNC_FAILED_EXIT_CODE",
    "OS_FILE_SYSTEM",
    "RECORD_ARROW_COLUMNS",
    "RECORD_CHECKSUM_PAIR_BYTES",
    "RECORD_HEADER",
    "STORE_PROPERTY_KEYS",
    "ConfigError",
    "CorruptFileError",
    "CorruptRecordError",
    "EpochEntry",
    "EpochFile",
    "FileHandle",
    "FileLock",
    "FileSystem",
    "FlushDiskType",
    "FsyncFailedError",
    "GetResult",
    "GetStatus",
    "InvalidNameError",
    "Message",
    "MessageBatch",
    "MessageStore",
    "OsFileSystem",
    "PutResult",
    "PutStatus",
    "QueueOffsetsError",
    "RecordBlock",
    "RecoveryScan",
    "ReplicatedDataError",
    "RetentionService",
    "StorageError",
    "StoreConfig",
    "StoreFormatError",
    "StoreLockedError",
    "StoreStats",
    "StoredMessage",
    "TagFilter",
    "TruncateBelowConfirmError",
    "atomic_write_bytes",
    "block_to_arrow",
    "check_topic_name",
    "decode_properties",
    "decode_record",
    "encode_properties",
    "exit_on_fsync_failure",
    "find_consistent_point",
    "java_string_hash",
    "make_msg_id",
    "records_to_arrow",
    "scan_record",
    "set_fsync_failure_handler",
    "topic_name_error",
]

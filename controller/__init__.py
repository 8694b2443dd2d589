"""rocketha's controller: Raft among controllers and the replicated replica-set metadata.

The controller imports nothing from `ha`, `storage_engine` or `connector`; brokers talk to it
through `controller.api` (messages only).
"""

from __future__ import annotations

from controller.errors import (
    BusyError,
    CodecError,
    ConfigError,
    ControllerError,
    CorruptLogError,
    CorruptSnapshotError,
    NotLeaderError,
    RaftStorageError,
    StoreLockedError,
)

__all__ = [
    "BusyError",
    "CodecError",
    "ConfigError",
    "ControllerError",
    "CorruptLogError",
    "CorruptSnapshotError",
    "NotLeaderError",
    "RaftStorageError",
    "StoreLockedError",
]

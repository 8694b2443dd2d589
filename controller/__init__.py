"""rocketha's controller: Raft among controllers and the replicated replica-set metadata.

The controller imports nothing from `ha`, `storage_engine` or `connector`; brokers talk to it
through `controller.api` (messages only).
"""

from __future__ import annotations

from controller.errors import (
    CodecError,
    ConfigError,
    ControllerError,
    CorruptLogError,
    CorruptSnapshotError,
    RaftStorageError,
)

__all__ = [
    "CodecError",
    "ConfigError",
    "ControllerError",
    "CorruptLogError",
    "CorruptSnapshotError",
    "RaftStorageError",
]

"""Errors of the controller (Raft core, its storage and the metadata state machine).

Expected outcomes (a proposal on a follower, a fenced SyncStateSet change) are result values,
never exceptions. The exceptions below are for bad configuration, bad input from the wire and
damaged files:

    ControllerError                 base; `retriable` says whether repeating the call may succeed
    ├── ConfigError                 a RaftConfig / controller setting is invalid (names the key)
    ├── CodecError                  bytes from the wire or the Raft log that do not decode
    ├── NotLeaderError              this node does not lead (`leader_address`, maybe None)
    ├── BusyError                   the log did not take or commit a request in time (retry)
    ├── StoreLockedError            another controller process uses the store directory
    └── RaftStorageError            the Raft storage directory cannot be used
        ├── CorruptLogError         a log record in the middle of the log fails its checksum
        └── CorruptSnapshotError    a snapshot or hard-state file fails its checksum
"""

from __future__ import annotations

from typing import ClassVar

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


class ControllerError(Exception):
    """Base of every error raised by the controller package."""

    retriable: ClassVar[bool] = False


class ConfigError(ControllerError, ValueError):
    """A configuration value is invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class CodecError(ControllerError, ValueError):
    """Bytes that do not decode as the named kind of message or command."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"cannot decode {what}: {reason}")
        self.what = what


class RaftStorageError(ControllerError):
    """The Raft storage directory (log, hard state, snapshots) cannot be used."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path


class CorruptLogError(RaftStorageError):
    """A record inside the log (not a torn tail) fails its checksum: the node needs repair."""

    def __init__(self, path: str, reason: str, *, byte_position: int) -> None:
        super().__init__(path, f"{reason} at byte {byte_position}")
        self.byte_position = byte_position


class CorruptSnapshotError(RaftStorageError):
    """A snapshot or hard-state file fails its checksum."""


class NotLeaderError(ControllerError):
    """Only the Raft leader acts; call `leader_address` (None while an election runs)."""

    retriable: ClassVar[bool] = True

    def __init__(self, leader_address: str | None) -> None:
        super().__init__(f"not the leader; the leader is {leader_address or 'unknown'}")
        self.leader_address = leader_address


class BusyError(ControllerError):
    """A request was dropped or did not commit within requestTimeoutMs."""

    retriable: ClassVar[bool] = True


class StoreLockedError(ControllerError):
    """Another process holds the lock on the controller's store directory."""

"""Raft for the controller: a sans-IO core (`RaftNode`), its storage and its wire codec.

The public surface; import only from here (`from controller.raft import RaftNode`).
"""

from __future__ import annotations

from controller.raft.codec import CODEC_VERSION, decode_message, encode_message
from controller.raft.config import CLUSTER_SIZES, RaftConfig
from controller.raft.core import RaftNode
from controller.raft.log import RaftLog
from controller.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HardState,
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ProposeResult,
    ProposeStatus,
    ReadState,
    Ready,
    Role,
    Snapshot,
    SnapshotRequest,
    SoftState,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from controller.raft.progress import Progress, ProgressState, quorum_index
from controller.raft.storage import (
    LOG_RECORD_BYTES_MAX,
    SNAPSHOT_BYTES_MAX,
    FileRaftStorage,
    MemoryRaftStorage,
    PersistentState,
    RaftStorage,
    save_ready,
)

__all__ = [
    "CLUSTER_SIZES",
    "CODEC_VERSION",
    "LOG_RECORD_BYTES_MAX",
    "SNAPSHOT_BYTES_MAX",
    "AppendRequest",
    "AppendResponse",
    "Entry",
    "EntryKind",
    "FileRaftStorage",
    "HardState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "MemoryRaftStorage",
    "Message",
    "PersistentState",
    "Progress",
    "ProgressState",
    "ProposeResult",
    "ProposeStatus",
    "RaftConfig",
    "RaftLog",
    "RaftNode",
    "RaftStorage",
    "ReadState",
    "Ready",
    "Role",
    "Snapshot",
    "SnapshotRequest",
    "SoftState",
    "TimeoutNow",
    "VoteRequest",
    "VoteResponse",
    "decode_message",
    "encode_message",
    "quorum_index",
    "save_ready",
]

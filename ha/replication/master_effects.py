"""What the master core (ha/replication/master_core.py) takes and gives, besides frames:
its settings, the snapshot of the master's log each call passes in, the effects it returns for
the shell (ha/replication/master_service.py) to carry out, and its statistics.
"""

from __future__ import annotations

import dataclasses

from ha.replication.frames import Frame, Transfer
from ha.replication.quorum import QuorumSettings
from storage_engine import EpochEntry

__all__ = [
    "CloseLink",
    "ConfirmTo",
    "LinkStats",
    "MasterEffect",
    "MasterLog",
    "MasterSettings",
    "MasterStats",
    "SendFrame",
    "SendLog",
    "SendMetadata",
    "SyncStateSetChanged",
    "Wait",
]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MasterSettings:
    quorum: QuorumSettings
    async_master: bool = False
    transfer_batch_bytes: int = 4 << 20
    heartbeat_interval_ms: int = 5000
    housekeeping_interval_ms: int = 20_000
    slave_not_catchup_max_ms: int = 15_000
    metadata_sync_interval_ms: int = 1000
    segment_size_bytes: int = 1 << 30
    links_max: int = 16


@dataclasses.dataclass(frozen=True, slots=True)
class MasterLog:
    """What the master's store holds right now (read by the shell, passed in)."""

    min_log_position: int
    log_position_end: int
    epochs: tuple[EpochEntry, ...]
    metadata_version: int = 0


# -- effects ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class SendFrame:
    link_id: int
    frame: Frame


@dataclasses.dataclass(frozen=True, slots=True)
class SendLog:
    """Ship [transfer.log_position, + size_bytes) of the CommitLog under `transfer`'s header."""

    link_id: int
    transfer: Transfer
    size_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class SendMetadata:
    link_id: int
    version: int


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    wait_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class CloseLink:
    link_id: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class ConfirmTo:
    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class SyncStateSetChanged:
    members: tuple[int, ...]  # broker ids, master first


MasterEffect = SendFrame | SendLog | SendMetadata | Wait | CloseLink | ConfirmTo \
    | SyncStateSetChanged


@dataclasses.dataclass(frozen=True, slots=True)
class LinkStats:
    link_id: int
    broker_id: int
    state: str
    acked_log_position: int
    next_log_position: int
    in_sync_state_set: bool
    last_caught_up_ms: int = -1  # the master's monotonic ms when it last held the log's end


@dataclasses.dataclass(frozen=True, slots=True)
class MasterStats:
    master_epoch: int
    confirm_log_position: int
    master_log_position: int
    sync_state_set: tuple[int, ...]
    need_ack_nums: int
    in_sync_replicas: int
    links: tuple[LinkStats, ...]
    accepted_sync_state_set: tuple[int, ...] | None = None  # controller mode
    lease_until_ms: int | None = None  # controller mode: acks need every slave after this


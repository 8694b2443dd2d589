"""Quorum arithmetic of the master (pure functions): needAckNums, admission, confirm position.

The rules (RIP-34 "quorum write and adaptive degradation" in the seeds, reference §2.6), as
applied here to a master that tracks its own SyncStateSet (SSS; the master is always a member):

    in_sync = 1 + |{slave in SSS : master_end - ack(slave) < haMaxGapNotInSync}|

    allAckInSyncStateSet=true:  need = |SSS|; refuse when |SSS| < minInSyncReplicas
    otherwise:                  need = inSyncReplicas
                                with enableAutoInSyncReplicas:
                                    need = max(min(need, in_sync), minInSyncReplicas)
                                refuse when need > in_sync

Controller mode (`plan_put_controller`): the set is the one the controller accepted, counted
whole, linked or not, and haMaxGapNotInSync plays no part (as in RocketMQ): a member the master
lost still counts until the controller accepts a set without it, so a master cut off from its
slaves (perhaps already deposed) cannot degrade to acking alone on its own say-so.

A refused put gets IN_SYNC_REPLICAS_NOT_ENOUGH before anything is written. An admitted put at
end position P is done when `need` replicas hold P: the master (its own position: written, or
fsynced under SYNC_FLUSH) and SSS members whose ack >= P. Only SSS members count, never a slave
that is still catching up, so a later election from the SSS (issue 5) cannot lose an acked put.

The confirm position is the highest position held by every replica whose ack counts, i.e. the
minimum over the master and the SSS members (docs/design.md §5.2: any SSS member may be elected
later, so a consumer must never see what one of them lacks); it never moves back. A lagging
member holds it back until it leaves the SSS (haMaxTimeSlaveNotCatchup), as in RocketMQ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

__all__ = ["PutPlan", "QuorumSettings", "confirm_position", "holders", "in_sync_count",
           "plan_put", "plan_put_controller"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QuorumSettings:
    total_replicas: int = 1
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    auto_in_sync_replicas: bool = False
    gap_not_in_sync_bytes_max: int = 256 << 20
    all_ack_in_sync_state_set: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class PutPlan:
    """`need` replicas must hold the put; `refused` says why it may not be written at all."""

    need: int
    in_sync: int
    refused: str = ""


def in_sync_count(settings: QuorumSettings, master_end: int, member_acks: Sequence[int]) -> int:
    """The master plus the SSS slaves whose lag is below haMaxGapNotInSync."""
    close = sum(1 for ack in member_acks if master_end - ack < settings.gap_not_in_sync_bytes_max)
    return min(1 + close, settings.total_replicas)


def plan_put(settings: QuorumSettings, master_end: int, member_acks: Sequence[int]) -> PutPlan:
    """needAckNums for the next put, or the reason it is refused (IN_SYNC_REPLICAS_NOT_ENOUGH).
    `member_acks` are the acked positions of the slaves in the SyncStateSet."""
    return _plan(settings, 1 + len(member_acks),
                 lambda: in_sync_count(settings, master_end, member_acks), "in sync")


def plan_put_controller(settings: QuorumSettings, sync_state_set_size: int) -> PutPlan:
    """needAckNums with the controller's accepted SyncStateSet (master included) as the
    in-sync count; see the module docstring."""
    return _plan(settings, sync_state_set_size, lambda: sync_state_set_size,
                 "in the controller's SyncStateSet")


def _plan(settings: QuorumSettings, sss_size: int, in_sync_of: Callable[[], int],
          where: str) -> PutPlan:
    if settings.all_ack_in_sync_state_set:
        if sss_size < settings.min_in_sync_replicas:
            return PutPlan(sss_size, sss_size, f"SyncStateSet has {sss_size} replica(s), "
                           f"minInSyncReplicas={settings.min_in_sync_replicas}")
        return PutPlan(sss_size, sss_size)
    in_sync = in_sync_of()
    need = settings.in_sync_replicas
    if settings.auto_in_sync_replicas:
        need = max(min(need, in_sync), settings.min_in_sync_replicas)
    if need > in_sync:
        return PutPlan(need, in_sync, f"{in_sync} replica(s) {where} (master included), "
                       f"{need} needed (inSyncReplicas={settings.in_sync_replicas}, "
                       f"minInSyncReplicas={settings.min_in_sync_replicas}, "
                       f"enableAutoInSyncReplicas={str(settings.auto_in_sync_replicas).lower()})")
    return PutPlan(need, in_sync)


def holders(log_position: int, master_position: int, member_acks: Sequence[int]) -> int:
    """How many replicas whose ack counts (master + SSS members) hold `log_position`."""
    return (master_position >= log_position) + sum(1 for ack in member_acks
                                                   if ack >= log_position)


def confirm_position(master_position: int, member_acks: Sequence[int], previous: int) -> int:
    """The lowest position among the master and the SSS members (never below `previous`)."""
    return max(previous, min([master_position, *member_acks]))

"""Quorum arithmetic: needAckNums, admission and confirm position, as tables.

Method: the seeds' replica layouts (2 replicas inSync=2; 3 replicas inSync=2; 4 replicas
inSync=3), with and without enableAutoInSyncReplicas, allAckInSyncStateSet and lagging slaves.
"""

from __future__ import annotations

import pytest

from ha.replication.quorum import QuorumSettings, confirm_position, holders, plan_put

MiB = 1 << 20


def settings(total: int, in_sync: int, min_in_sync: int = 1, auto: bool = False,
             all_ack: bool = False, gap: int = 256 * MiB) -> QuorumSettings:
    return QuorumSettings(total_replicas=total, in_sync_replicas=in_sync,
                          min_in_sync_replicas=min_in_sync, auto_in_sync_replicas=auto,
                          gap_not_in_sync_bytes_max=gap, all_ack_in_sync_state_set=all_ack)


END = 1000 * MiB


@pytest.mark.parametrize("name, quorum, member_acks, need, refused", [
    ("2 replicas inSync=2, slave in SSS", settings(2, 2), [END], 2, False),
    ("2 replicas inSync=2, slave gone", settings(2, 2), [], 2, True),
    ("2 replicas inSync=2, slave gone, auto min=1", settings(2, 2, 1, auto=True), [], 1, False),
    ("2 replicas inSync=2, auto but min=2", settings(2, 2, 2, auto=True), [], 2, True),
    ("3 replicas inSync=2, one slave in SSS", settings(3, 2), [END], 2, False),
    ("3 replicas inSync=2, both in SSS", settings(3, 2), [END, END], 2, False),
    ("4 replicas inSync=3, two of three in SSS", settings(4, 3), [END, END], 3, False),
    ("4 replicas inSync=3, one in SSS", settings(4, 3), [END], 3, True),
    ("4 replicas inSync=3, one in SSS, auto min=2", settings(4, 3, 2, auto=True), [END], 2,
     False),
    ("lag beyond haMaxGapNotInSync does not count", settings(2, 2, gap=MiB), [END - 2 * MiB], 2,
     True),
    ("lag beyond the gap, auto degrades", settings(2, 2, 1, auto=True, gap=MiB),
     [END - 2 * MiB], 1, False),
    ("allAck: every SSS member", settings(3, 2, all_ack=True), [END, END], 3, False),
    ("allAck: SSS below minInSyncReplicas", settings(3, 2, 2, all_ack=True), [], 1, True),
    ("total caps in_sync", settings(1, 1), [END, END], 1, False),
])
def test_plan_put(name: str, quorum: QuorumSettings, member_acks: list[int], need: int,
                  refused: bool) -> None:
    plan = plan_put(quorum, END, member_acks)
    assert (plan.need, bool(plan.refused)) == (need, refused), plan


def test_holders_count_master_and_members() -> None:
    assert holders(100, 100, [99, 100, 150]) == 3
    assert holders(100, 90, [99]) == 0


@pytest.mark.parametrize("master, acks, previous, expected", [
    (500, [300, 400], 0, 300),  # every SSS member must hold it: the minimum
    (500, [400], 0, 400),
    (300, [500], 0, 300),  # the master's own position (fsynced, under SYNC_FLUSH) counts too
    (500, [], 100, 500),  # the master alone
    (500, [50], 100, 100),  # never moves back
])
def test_confirm_position(master: int, acks: list[int], previous: int, expected: int) -> None:
    assert confirm_position(master, acks, previous) == expected

"""Master election policy (RocketMQ's DefaultElectPolicy), a pure function of facts passed in.

Inputs: the replica set as the replicated state has it, and what heartbeats say about its alive
brokers (epoch of their last log entry, max log position, priority). Output: an `Election`.

    eligible = alive members of the SyncStateSet
               (first election of a set, master_epoch == 0: every alive registered broker,
                since no master ever acknowledged anything)
    1. the current master is eligible and no other broker is designated -> keep it
       (MASTER_STILL_EXIST: nothing to write), unless its heartbeat abandons the epoch (it
       restarted since the epoch began: ha/replication/role_core.py REELECT); then 3 decides, the
       old master included, and it may win a new epoch
    2. a designated broker: it, if eligible (or, with unclean election on, alive at all);
       otherwise ELECT_MASTER_FAILED
    3. the best eligible broker by: highest epoch, then highest max log position, then lowest
       priority value, then lowest broker id (so the choice is deterministic)
    4. nobody eligible and `unclean_enabled`: the best alive registered broker (may lose
       acknowledged messages; off by default)
    5. nobody: MASTER_NOT_AVAILABLE
    Lame duck: a broker whose heartbeat says it is leaving (about to stop) is left out of 2
    and 3 while another broker is eligible (with nobody else, it may still be chosen: a
    master that stops soon is better than none). 1 keeps a leaving master: replacing one
    that still serves goes through its handover (controller/handover.py) or an operator's
    election, never a scan.

The caller turns OK (and MASTER_NOT_AVAILABLE while a master is still recorded) into an
`ElectMaster` command fenced by the master epoch it decided on; applying it raises the epoch.

`positions_final` guards every election that replaces a master (found dead by a probe, silent
past the heartbeat timeout, or abandoning its epoch): with a quorum smaller than the
SyncStateSet (inSyncReplicas=2 of 3, the default of `rocketha-cluster up`) an acknowledged
message may be on the master and one slave only, so the new master must be the best of EVERY
other member of the set, each with its final position: its latest heartbeat says it lost the
master of this epoch (a slave still linked to the old master may be acking for it, and a
position heard before the loss may understate its log). Until then nobody is elected: a
member that is down, or that the controller cannot hear, stops the election (as a Raft
majority would), and the master keeps serving those who still reach it (past its lease only
with every member's ack). Found by a chaos campaign's ring partition (tests/chaos/nemesis.py
`shape`): the controller leader heard one slave only, elected it, and the 156 messages the cut-
off master had acknowledged with the other slave's ack were cut as a fork. Before that, an
early election that ranked a stale position cut 10 acked rows the same way. After a "no
master" fence (master_broker_id None) every member of the set must be heard, the old master
included (the controller no longer knows which member it was).

`failover_decision` is the leader's periodic check of one replica set (RocketMQ's
scanInactiveMasterAndTriggerReelect): nothing while the master is alive (and keeps its
epoch: an abandoned one is elected again at once), or while this
controller has led for less than one heartbeat timeout (its liveness table may not know the
master yet); nothing when no broker of the set is alive; otherwise the election above, turned
into the ElectMaster to propose (a new master, or "no master" to fence a dead one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping

from controller.api import ReplicaInfo

__all__ = ["BrokerLiveness", "Election", "choose_master", "failover_decision",
           "positions_final"]


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerLiveness:
    """What the latest heartbeat of an alive broker says."""

    broker_id: int
    master_epoch: int
    max_log_position: int
    election_priority: int
    abandoned_epoch: int = 0  # a master that gives up this epoch (restarted): elect again
    leaving: bool = False  # lame duck: about to stop, chosen only when nobody else can be


@dataclasses.dataclass(frozen=True, slots=True)
class Election:
    status: str  # OK | MASTER_STILL_EXIST | ELECT_MASTER_FAILED | MASTER_NOT_AVAILABLE
    broker_id: int | None


def _best(candidates: Iterable[BrokerLiveness]) -> int | None:
    ranked = sorted(
        candidates,
        key=lambda b: (-b.master_epoch, -b.max_log_position, b.election_priority, b.broker_id),
    )
    return ranked[0].broker_id if ranked else None


def choose_master(
    replica: ReplicaInfo,
    alive: Mapping[int, BrokerLiveness],
    *,
    designated_broker_id: int | None = None,
    unclean_enabled: bool = False,
) -> Election:
    registered = {member.broker_id for member in replica.brokers}
    alive_registered = {broker_id: alive[broker_id] for broker_id in registered & set(alive)}
    if replica.master_epoch == 0:
        eligible = alive_registered
    else:
        eligible = {broker_id: info for broker_id, info in alive_registered.items()
                    if broker_id in replica.sync_state_set}
    master = replica.master_broker_id
    if (master is not None and master in eligible and designated_broker_id in (None, master)
            and not _abandoned(replica, eligible[master])):
        return Election("MASTER_STILL_EXIST", master)
    if designated_broker_id is not None:
        pool = _staying(alive_registered if unclean_enabled else eligible)
        if designated_broker_id in pool:
            return Election("OK", designated_broker_id)
        return Election("ELECT_MASTER_FAILED", None)
    chosen = _best(_staying(eligible).values())
    if chosen is None and unclean_enabled:
        chosen = _best(_staying(alive_registered).values())
    if chosen is None:
        return Election("MASTER_NOT_AVAILABLE", None)
    return Election("OK", chosen)


def failover_decision(
    replica: ReplicaInfo,
    alive: Mapping[int, BrokerLiveness],
    *,
    reported_lost: Collection[int],
    led_for_ms: int,
    heartbeat_timeout_ms: int,
    unclean_enabled: bool,
) -> Election | None:
    """What the leader's scan should propose for `replica` (None: nothing).

    Returns an Election whose `broker_id` is the new master, or None-as-master ("no master",
    status MASTER_NOT_AVAILABLE) to fence a dead master nobody can replace. `reported_lost`:
    the members whose positions are final: their latest heartbeat says they lost the master
    of this epoch, or came on time well after the master's lease lapsed
    (LiveTable.reported_master_lost); a master is replaced only once `positions_final`.
    """
    master = replica.master_broker_id
    if master is not None:
        if master in alive and not _abandoned(replica, alive[master]):
            return None
        if master not in alive and led_for_ms < heartbeat_timeout_ms:
            return None  # a new leader's liveness table may not know the master yet
    if not alive:
        return None
    election = choose_master(replica, alive, unclean_enabled=unclean_enabled)
    if election.status == "OK":
        if not unclean_enabled and not positions_final(replica, alive, reported_lost):
            return None  # a member's acks may be missing from the best one heard: wait
        return election
    if election.status == "MASTER_NOT_AVAILABLE" and master is not None:
        return election
    return None


def _staying(candidates: Mapping[int, BrokerLiveness]) -> Mapping[int, BrokerLiveness]:
    """The candidates that are not leaving (lame ducks), or all of them if every one is."""
    staying = {broker_id: info for broker_id, info in candidates.items() if not info.leaving}
    return staying or candidates


def _abandoned(replica: ReplicaInfo, master: BrokerLiveness) -> bool:
    """Does the master's latest heartbeat give up the current epoch (it restarted)?"""
    return master.abandoned_epoch == replica.master_epoch > 0


def positions_final(replica: ReplicaInfo, alive: Mapping[int, BrokerLiveness],
                    reported_lost: Collection[int]) -> bool:
    """May an election that replaces the master rank the members by their positions now?
    (See the module docstring.) The first election of a set replaces nobody."""
    if replica.master_epoch == 0:
        return True
    master = replica.master_broker_id
    if master is None:  # fenced "no master": the old one is some member; hear them all
        return set(replica.sync_state_set) <= set(alive)
    others = set(replica.sync_state_set) - {master}
    return others <= set(alive) and others <= set(reported_lost)

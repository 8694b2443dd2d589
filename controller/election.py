"""Master election policy (RocketMQ's DefaultElectPolicy), a pure function of facts passed in.

Inputs: the replica set as the replicated state has it, and what heartbeats say about its alive
brokers (epoch of their last log entry, max log position, priority). Output: an `Election`.

    eligible = alive members of the SyncStateSet
               (first election of a set, master_epoch == 0: every alive registered broker,
                since no master ever acknowledged anything)
    1. the current master is eligible and no other broker is designated -> keep it
       (MASTER_STILL_EXIST: nothing to write), unless its heartbeat abandons the epoch (it
       restarted since the epoch began: ha/role_core.py REELECT); then 3 decides, the old
       master included, and it may win a new epoch
    2. a designated broker: it, if eligible (or, with unclean election on, alive at all);
       otherwise ELECT_MASTER_FAILED
    3. the best eligible broker by: highest epoch, then highest max log position, then lowest
       priority value, then lowest broker id (so the choice is deterministic)
    4. nobody eligible and `unclean_enabled`: the best alive registered broker (may lose
       acknowledged messages; off by default)
    5. nobody: MASTER_NOT_AVAILABLE

The caller turns OK (and MASTER_NOT_AVAILABLE while a master is still recorded) into an
`ElectMaster` command fenced by the master epoch it decided on; applying it raises the epoch.

`positions_final` guards the early election (a master found dead by a probe, before its
heartbeats time out): the candidates are ranked by the log positions their heartbeats carry,
which trail by up to one heartbeat interval while the master was still shipping; a slave's
report that it lost the master carries its final position (nothing arrives after that), so the
election waits until every alive SyncStateSet member has sent one, or `wait_max_ms` passed.
Ranking a stale position first could elect a slave that lacks acknowledged messages another
member holds (seen: 10 acked rows cut as a fork on the better slave).

`failover_decision` is the leader's periodic check of one replica set (RocketMQ's
scanInactiveMasterAndTriggerReelect): nothing while the master is alive (and keeps its
epoch: an abandoned one is elected again at once), or while this
controller has led for less than one heartbeat timeout (its liveness table may not know the
master yet); nothing when no broker of the set is alive; otherwise the election above, turned
into the ElectMaster to propose (a new master, or "no master" to fence a dead one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

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
        pool = alive_registered if unclean_enabled else eligible
        if designated_broker_id in pool:
            return Election("OK", designated_broker_id)
        return Election("ELECT_MASTER_FAILED", None)
    chosen = _best(eligible.values())
    if chosen is None and unclean_enabled:
        chosen = _best(alive_registered.values())
    if chosen is None:
        return Election("MASTER_NOT_AVAILABLE", None)
    return Election("OK", chosen)


def failover_decision(
    replica: ReplicaInfo,
    alive: Mapping[int, BrokerLiveness],
    *,
    led_for_ms: int,
    heartbeat_timeout_ms: int,
    unclean_enabled: bool,
) -> Election | None:
    """What the leader's scan should propose for `replica` (None: nothing).

    Returns an Election whose `broker_id` is the new master, or None-as-master ("no master",
    status MASTER_NOT_AVAILABLE) to fence a dead master nobody can replace.
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
        return election
    if election.status == "MASTER_NOT_AVAILABLE" and master is not None:
        return election
    return None


def _abandoned(replica: ReplicaInfo, master: BrokerLiveness) -> bool:
    """Does the master's latest heartbeat give up the current epoch (it restarted)?"""
    return master.abandoned_epoch == replica.master_epoch > 0


def positions_final(replica: ReplicaInfo, alive: Mapping[int, BrokerLiveness],
                    reported_lost: Iterable[int], *, waited_ms: int, wait_max_ms: int) -> bool:
    """May the election rank `alive` by their log positions now? (See the module docstring.)
    `reported_lost`: members whose latest heartbeat says they lost the master of this epoch."""
    members = {broker_id for broker_id in replica.sync_state_set
               if broker_id in alive and broker_id != replica.master_broker_id}
    return members <= set(reported_lost) or waited_ms >= wait_max_ms

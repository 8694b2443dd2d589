"""The controller leader's answers to brokers, as a sans-IO core: the replicated state, the
liveness table and the request in; the answer (and whether to scan now) out.

controller/handlers.py and controller/watchdog.py (asyncio, Raft proposals, probes) and the
cluster simulator's SimController (tests/sim/cluster_sim.py) both ask these functions, so what
a broker hears, and when a replica set gets a new master, is decided once:

    request                facts                                     answer
    broker_heartbeat       the broker is not a member of its set     BROKER_NOT_REGISTERED
                           an election of another master is          OK, no role (no lease
                           decided and not yet applied, or an        renewal: lease_held)
                           operator's election lets this master's
                           lease lapse
                           otherwise                                 OK, role_of(replica,
                                                                     broker), master_silent
                                                                     when the master has not
                                                                     heartbeated for half the
                                                                     timeout
                           the set has no master, or its master      wake ELECT: scan now
                           abandons its epoch (ha/replication/role_core.py
                           REELECT)
                           a member slave lost its link to the       wake PROBE: probe that
                           master of this epoch                      master now (watchdog.py)
    alter_sync_state_set   no such set                               REPLICA_SET_NOT_FOUND
                           a proposed member is not alive            INVALID_REPLICAS
                           otherwise                                 propose it (the state
                                                                     machine fences it by
                                                                     epochs)
    scan (every           the set's master dead or absent, ...       controller/election.py
    scanInterval)                                                    failover_decision on
                                                                     this leader's liveness
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from controller.api import BrokerHeartbeat, ReplicaInfo, RoleChange, role_of
from controller.election import Election, failover_decision
from controller.liveness import LiveTable
from controller.raft.log import RaftLog

__all__ = ["HeartbeatAnswer", "Wake", "answer_heartbeat", "lease_held", "refuse_sync_state_set",
           "scan_decision", "state_current"]


class Wake(enum.Enum):
    NONE = "NONE"
    ELECT = "ELECT"  # scan now: the set has no master, or its master abandons its epoch
    PROBE = "PROBE"  # a slave lost the master of this epoch: probe it now


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    status: str  # OK | BROKER_NOT_REGISTERED
    role: RoleChange | None = None
    master_silent: bool = False
    wake: Wake = Wake.NONE


def answer_heartbeat(replica: ReplicaInfo | None, request: BrokerHeartbeat, *,
                     lease_held: bool, master_silent_ms: int | None,
                     heartbeat_timeout_ms: int) -> HeartbeatAnswer:
    """The leader's reply to one heartbeat (already recorded in the liveness table).
    `lease_held`: an operator's election waits for this broker's master lease to lapse;
    `master_silent_ms`: how long the set's master has not been heard (None: unknown)."""
    if replica is None or request.broker_id not in {m.broker_id for m in replica.brokers}:
        return HeartbeatAnswer("BROKER_NOT_REGISTERED")
    abandoned = (request.broker_id == replica.master_broker_id
                 and request.master_epoch_abandoned == replica.master_epoch > 0)
    # abandoned: the master restarted since its epoch began: elect again once the other
    # members' final positions are in (election.positions_final)
    wake = Wake.NONE
    if replica.master_broker_id is None or abandoned:
        wake = Wake.ELECT
    elif (request.master_unreachable_epoch == replica.master_epoch
          and request.broker_id in replica.sync_state_set
          and request.broker_id != replica.master_broker_id):
        wake = Wake.PROBE
    if lease_held:  # no renewal: the role would renew the master's lease
        return HeartbeatAnswer("OK", None, wake=wake)
    silent = (request.broker_id != replica.master_broker_id and master_silent_ms is not None
              and 2 * master_silent_ms >= heartbeat_timeout_ms)
    return HeartbeatAnswer("OK", role_of(replica, request.broker_id), silent, wake)


def lease_held(holds: Mapping[str, tuple[int, int | None]], replica: ReplicaInfo,
               broker_id: int) -> bool:
    """Is `broker_id` the master of `replica` whose lease the leader lets lapse? `holds`:
    replica set -> (master epoch, master id) from the moment the leader decided to replace
    that master until the election is applied (a scan's, or an operator's). A heartbeat the
    leader answers meanwhile comes from the state not yet changed: naming the broker master
    there would renew a lease past the election (sim seed 45: 593 ms past it; under auto-isr
    such a master acks with a majority that may leave the new master out)."""
    hold = holds.get(replica.broker_name)
    return (hold is not None and hold == (replica.master_epoch, broker_id)
            and broker_id == replica.master_broker_id)


def state_current(log: RaftLog, leader_term: int) -> bool:
    """Has this leader applied an entry of its own term (the NOOP it appends first)? Until it
    has, its state may lack an election the previous leader committed (an ElectMaster it
    proposed, which the new leader has not applied yet), so a heartbeat answered from that
    state would name the replaced master again and renew its lease past the election: the
    window of lease_held, opened by a leader change. Once the NOOP is applied, so is every
    entry committed before it, and the replies name the masters the log does."""
    return log.term_at(log.applied_index) == leader_term


def refuse_sync_state_set(replica: ReplicaInfo | None, members: tuple[int, ...],
                          alive: set[int] | dict[int, object]) -> str | None:
    """Why a master's SyncStateSet proposal is refused before Raft (None: propose it)."""
    if replica is None:
        return "REPLICA_SET_NOT_FOUND"
    if any(member not in alive for member in members):
        return "INVALID_REPLICAS"
    return None


def scan_decision(replica: ReplicaInfo, live: LiveTable, now_ms: int, *,
                  leader_since_ms: int | None, heartbeat_timeout_ms: int,
                  unclean_enabled: bool) -> Election | None:
    """The leader's periodic check of one replica set (after `live.expire(now_ms)`): the
    election to propose as an ElectMaster (None: nothing to do)."""
    return failover_decision(
        replica, live.alive(replica, now_ms),
        reported_lost=live.reported_master_lost(replica, now_ms),
        led_for_ms=0 if leader_since_ms is None else now_ms - leader_since_ms,
        heartbeat_timeout_ms=heartbeat_timeout_ms, unclean_enabled=unclean_enabled)

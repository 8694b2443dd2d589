"""A master's graceful handover: which election the leader proposes for it (pure).

Why: a master that is asked to stop (SIGTERM, `rocketha-admin broker shutdown`) used to look
like a crash to its clients: their puts failed over after the watchdog noticed, or after an
operator's election waited out the master's lease (up to lease_max_ms). A master that stops
on purpose can do better, because it can promise something a crashed one cannot: that it
takes no more puts. The broker (ha/broker/handover.py) does, in this order:

    1. it says it is leaving in its heartbeats (lame duck: no election picks it, election.py)
    2. it seals: new puts wait at its gate, and it waits for the puts in flight to end; its
       log end is then final (`sealed_log_position`): it acknowledges nothing past it, and
       nothing more at all until it learns the outcome
    3. it waits until a slave of its SyncStateSet has acked that whole log (`target`)
    4. it sends `handover_master`; the leader checks the request against the replicated state
       (here) and proposes ElectMaster(reason="handover"); the state machine checks again that
       the new master is in the SyncStateSet (controller/state.py), so a replay decides the same
    5. on OK it fences itself (the held puts answer NOT_MASTER naming the new master, and the
       idempotent producer sends them there); on a refusal it opens the gate again, still the
       master of its epoch; with no answer it stays sealed (it cannot know)

Safety: every put the old master acknowledged is at or below the sealed position, and the new
master holds that position before it is elected, so no acknowledged put is lost and no
position changes. No two masters take puts in one epoch: the old master takes none from the
seal on, and the new one takes puts at epoch + 1 only. The lease wait of an operator's
election is not needed: it guards against puts acked under the lease by a master that does
not know it is being replaced, and a sealed master acks none.

Trust: the request is a member's own call (controller/auth/member_check.py: the caller's
certificate names this broker), and the facts in it (its log end, its slave's ack) are the
master's; a broker could lie about them as it could ack puts it never replicated.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.api import HandoverRequest, ReplicaInfo
from controller.election import BrokerLiveness
from controller.state import HANDOVER, ElectMaster

__all__ = ["decide_handover"]


def decide_handover(replica: ReplicaInfo | None, request: HandoverRequest,
                    alive: Mapping[int, BrokerLiveness]) -> tuple[str, ElectMaster | None]:
    """The status to answer and the command to propose (None: refused with that status).

    Refusals, in order: the set is unknown; the caller is not its master; the epoch moved on;
    the target is the master itself or not in the SyncStateSet (it may lack acknowledged
    puts); the target is not alive or is leaving too; the target has not acked the sealed
    log end yet."""
    if replica is None:
        return "REPLICA_SET_NOT_FOUND", None
    target = request.target_broker_id
    checks = (
        (replica.master_broker_id != request.broker_id, "INVALID_MASTER"),
        (replica.master_epoch != request.master_epoch, "FENCED_MASTER_EPOCH"),
        (target == request.broker_id or target not in replica.sync_state_set,
         "INVALID_REPLICAS"),
        (target not in alive or alive[target].leaving, "ELECT_MASTER_FAILED"),
        (request.target_acked_log_position < request.sealed_log_position,
         "ELECT_MASTER_FAILED"),
    )
    for failed, status in checks:
        if failed:
            return status, None
    return "OK", ElectMaster.decided_on(replica, target, reason=HANDOVER)

"""The broker's put path decisions, as a sans-IO core: facts in, a status (or "wait on") out.

The shells carry out the IO between the questions: ha/broker/replication.py on the put's
thread (blocking waits for the flush and the quorum), the simulator's SimBroker
(tests/sim/cluster_sim.py) between events. When a put is DONE (how many replicas, which of
them, the lease) is ha/replication/master_quorum.py's `put_progress`; this core says what each
outcome means for the client, in the order the put meets them:

    question                      facts                                 answer
    admit                         fenced (controller mode: another       NOT_MASTER
                                  broker is master, or a role change
                                  is under way)
                                  a slave service runs                   NOT_MASTER
                                  controller mode, no master service     NOT_MASTER (changing
                                                                         role)
                                  no replication (one replica)           STANDALONE: the store's
                                                                         own put, then `answer`
                                  a master service                       REPLICATE
    plan (before any write)       the quorum plan refused (fewer in-sync IN_SYNC_REPLICAS_NOT_
                                  replicas than needed)                  ENOUGH
    flush (SYNC_FLUSH)            not durable when the wait expired      FLUSH_DISK_TIMEOUT
                                  not durable, the broker deposed        FLUSH_SLAVE_TIMEOUT
    quorum                        DONE                                   PUT_OK (then `answer`)
                                  UNREACHABLE                            SLAVE_NOT_AVAILABLE
                                  waiting, expired or the master         FLUSH_SLAVE_TIMEOUT
                                  service stopping (deposed, shut down)
    answer                        PUT_OK but the broker was deposed      FLUSH_SLAVE_TIMEOUT
                                  meanwhile (fenced)                     (its fate is the new
                                                                         master's: truncated at
                                                                         the fork point or kept)

`None` from a question: the put waits on (the shell decides how long: syncFlushTimeout).
"""

from __future__ import annotations

import enum

from ha.replication.master_core import PutProgress
from ha.replication.quorum import PutPlan
from storage_engine import PutStatus

__all__ = ["Admission", "admit", "answer", "flush_status", "plan_status", "quorum_status"]


class Admission(enum.Enum):
    FENCED = "FENCED"  # NOT_MASTER, naming why (the controller names another master)
    SLAVE = "SLAVE"  # NOT_MASTER, naming the master
    CHANGING_ROLE = "CHANGING_ROLE"  # NOT_MASTER: controller mode, no master service yet
    STANDALONE = "STANDALONE"  # no replication: the store's put
    REPLICATE = "REPLICATE"  # plan, append, flush, wait for the quorum

    @property
    def refused(self) -> bool:
        return self in (Admission.FENCED, Admission.SLAVE, Admission.CHANGING_ROLE)


def admit(*, fenced: bool, following: bool, serving: bool, runtime_roles: bool) -> Admission:
    """May this broker take a write now? `serving`: a master service of this term runs;
    `following`: a slave service runs."""
    if fenced:
        return Admission.FENCED
    if following:
        return Admission.SLAVE
    if serving:
        return Admission.REPLICATE
    return Admission.CHANGING_ROLE if runtime_roles else Admission.STANDALONE


def plan_status(plan: PutPlan) -> PutStatus | None:
    """Before any write: refused when too few replicas are in sync (nothing is written)."""
    return PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH if plan.refused else None


def flush_status(durable: bool, *, expired: bool, deposed: bool = False) -> PutStatus | None:
    """The put's bytes and the local fsync (SYNC_FLUSH; always durable otherwise)."""
    if durable:
        return None
    if expired:
        return PutStatus.FLUSH_DISK_TIMEOUT
    if deposed:
        return PutStatus.FLUSH_SLAVE_TIMEOUT
    return None


def quorum_status(progress: PutProgress | None, *, expired: bool, stopping: bool
                  ) -> PutStatus | None:
    """The replicas' side (`progress`: master_core.put_progress; None: no master service)."""
    if progress is PutProgress.DONE:
        return PutStatus.PUT_OK
    if progress is PutProgress.UNREACHABLE:
        return PutStatus.SLAVE_NOT_AVAILABLE
    if expired or stopping or progress is None:
        return PutStatus.FLUSH_SLAVE_TIMEOUT
    return None


def answer(status: PutStatus, *, fenced: bool) -> PutStatus:
    """What the client hears: a PUT_OK reached while the broker was deposed is not one."""
    if fenced and status is PutStatus.PUT_OK:
        return PutStatus.FLUSH_SLAVE_TIMEOUT
    return status

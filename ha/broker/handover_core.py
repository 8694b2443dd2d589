"""Sans-IO core of a master's graceful handover: its put gate and the order of its steps.

Why a gate: a master that hands its role over must know its final log end before it names
a successor (controller/handover.py), so no put may be in flight then, and none may start
until the outcome is known. Refusing the puts that arrive meanwhile would show every
producer an error; holding them costs a short pause instead, and once the successor is
elected they are answered NOT_MASTER (never stored here), which an idempotent producer
sends on to the new master with the same (producer id, sequence).

Phases (one way, except REOPENED after a refusal):

    SERVING ──seal──► SEALING ──no put in flight──► CATCHING_UP (sealed_log_position known)
        ──target acked it──► ASKING ──OK──► HANDED_OVER   (held puts: NOT_MASTER)
                                   ├─refused──► REOPENED  (still the master: puts go on)
                                   └─no answer──► UNKNOWN (held puts time out; the broker
                                                  cannot tell whether it was replaced)
    SEALING/CATCHING_UP ──abort (deadline)──► REOPENED  (nothing was asked yet)
    HANDED_OVER/UNKNOWN ──a role from the controller (slave, or master of a newer epoch)──►
        SERVING   (`rearm`: a broker that handed over on `elect` keeps running; its gate
                   must not refuse the puts of a later term)
    REOPENED ──seal──► SEALING  (a later handover may try again)

`admit` answers each put: ADMIT (counted in flight until `put_done`), HOLD (ask again when the
phase changes, up to the hold deadline) or REFUSE. The shell (ha/broker/handover.py) keeps it
under one lock and does the waiting; the tests drive it step by step
(tests/ha/test_handover_core.py).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

__all__ = ["REFUSALS", "Admit", "HandoverCore", "Phase", "choose_target"]

# Answers that say the controller proposed nothing, or that the state machine refused what it
# proposed: the election did not happen and cannot happen later. Any other answer (BUSY, a
# leader lost mid-proposal, INTERNAL_ERROR, none) may hide an entry that still commits.
REFUSALS = frozenset({"REPLICA_SET_NOT_FOUND", "INVALID_MASTER", "FENCED_MASTER_EPOCH",
                      "FENCED_SYNC_STATE_SET_EPOCH", "INVALID_REPLICAS", "ELECT_MASTER_FAILED",
                      "BROKER_NOT_REGISTERED"})


class Phase(enum.Enum):
    SERVING = "serving"
    SEALING = "sealing"
    CATCHING_UP = "catching_up"
    ASKING = "asking"
    HANDED_OVER = "handed_over"
    REOPENED = "reopened"
    UNKNOWN = "unknown"


class Admit(enum.Enum):
    ADMIT = "admit"
    HOLD = "hold"
    REFUSE = "refuse"


_OPEN = (Phase.SERVING, Phase.REOPENED)
_HELD = (Phase.SEALING, Phase.CATCHING_UP, Phase.ASKING, Phase.UNKNOWN)


def choose_target(acked: Mapping[int, int], sync_state_set: Iterable[int], *,
                  master_broker_id: int, leaving: Iterable[int] = (),
                  named: int | None = None,
                  link_ids: Mapping[int, int] | None = None) -> int | None:
    """The slave to hand over to: a member of the SyncStateSet (it holds every acknowledged
    put), not the master, not leaving; `named` (an operator's `elect`): that member or none.

    Among several: with `link_ids` (broker id -> its link's number, in the order the links
    opened), the one linked longest, else the furthest acked (ties: the lowest id). Why the
    oldest link: a slave that (re)joined lately has not brought its idempotence table up to
    date yet (it follows the log once a second, ha/broker/roles.py), so its take-over has to
    rebuild it: 457 ms in a rolling restart under load 20 (docs/planned-operations.md),
    against 7-28 ms for a slave linked for a while. Any member catches up to the sealed end
    within milliseconds: it is in the SyncStateSet."""
    out = set(leaving) | {master_broker_id}
    members = [broker_id for broker_id in sync_state_set
               if broker_id not in out and broker_id in acked
               and named in (None, broker_id)]
    if not members:
        return None
    if link_ids is not None:
        return min(members, key=lambda broker_id: (link_ids.get(broker_id, 0), broker_id))
    return min(members, key=lambda broker_id: (-acked[broker_id], broker_id))


class HandoverCore:
    """The gate's state; not thread-safe (the shell holds a lock around every call)."""

    def __init__(self) -> None:
        self.phase = Phase.SERVING
        self.in_flight = 0
        self.sealed_log_position: int | None = None
        self.new_master: str | None = None  # the successor's address, once HANDED_OVER

    def admit(self) -> Admit:
        if self.phase in _OPEN:
            self.in_flight += 1
            return Admit.ADMIT
        if self.phase in _HELD:
            return Admit.HOLD
        return Admit.REFUSE

    def put_done(self) -> None:
        assert self.in_flight > 0, "put_done without admit"
        self.in_flight -= 1

    def seal(self) -> bool:
        """Start a handover; False while one runs or after it handed over (a second request
        does nothing). A gate reopened by a refusal or a deadline may seal again."""
        if self.phase not in _OPEN:
            return False
        self.phase = Phase.SEALING
        return True

    def sealed_at(self, log_position_end: int) -> bool:
        """Once no put is in flight: `log_position_end` (read now) is final. True if it is."""
        if self.phase is not Phase.SEALING or self.in_flight:
            return False
        self.sealed_log_position = log_position_end
        self.phase = Phase.CATCHING_UP
        return True

    def ready_to_ask(self, target_acked_log_position: int) -> bool:
        """The target acked the sealed log end: ask the controller (ASKING) and return True."""
        if (self.phase is not Phase.CATCHING_UP or self.sealed_log_position is None
                or target_acked_log_position < self.sealed_log_position):
            return False
        self.phase = Phase.ASKING
        return True

    def answered(self, status: str | None, new_master: str | None = None) -> None:
        """The controller's answer (None: none came, or one that cannot be read). Only a
        definite refusal (REFUSALS) reopens the gate: after BUSY or a lost leader the election
        may still commit, and a master that took puts again could ack some its successor
        lacks."""
        assert self.phase is Phase.ASKING, self.phase
        if status == "OK":
            self.phase, self.new_master = Phase.HANDED_OVER, new_master
        elif status in REFUSALS:
            self.phase = Phase.REOPENED
        else:
            self.phase = Phase.UNKNOWN

    def rearm(self) -> bool:
        """The controller gave this broker a role after a handover (it follows the new master,
        or it is master of a newer epoch): the gate opens for that role, whose own fence
        answers the puts. True if it was closed. Not before an answer came: while ASKING the
        election may still commit."""
        if self.phase not in (Phase.HANDED_OVER, Phase.UNKNOWN):
            return False
        self.phase, self.sealed_log_position, self.new_master = Phase.SERVING, None, None
        return True

    def abort(self) -> bool:
        """Give up before asking (the deadline passed while sealing or catching up): the
        controller was told nothing, so this is still the master; True if reopened."""
        if self.phase not in (Phase.SEALING, Phase.CATCHING_UP):
            return False
        self.phase = Phase.REOPENED
        return True

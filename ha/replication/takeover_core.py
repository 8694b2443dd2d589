"""The take-over sequence of a new master, as a sans-IO core: the log's state in, effects out.

A broker the controller names master of epoch E (ha/replication/role_core.py TAKE_OVER) has stopped
following and is fenced; before it takes a write, its log must become the start of E's term.
`plan_take_over` says how, in order; the shells carry the effects out one after another:
ha/broker/replication.py `become_master` (the storage engine; the steps up to `OpenTerm`) and
ha/broker/roles.py (`LiftFence`, after the idempotence table is rebuilt), and the simulator's
SimBroker (tests/sim/cluster_sim.py, on its byte model or on the real engine), so the two run
the same sequence.

    effect                  when                              why
    CutTail(X)              the log ends inside a record      a slave's log can end inside one
                            (X: the last whole record's end)  (batches are cut by size); a
                                                              master must append after whole
                                                              records only. Confirm comes
                                                              down to X if it was above (no
                                                              reader could see a partial one)
    ConfirmTo(end)          always                            docs/design.md §5.4: everything a new
                                                              master holds is confirmed (it
                                                              came from the SyncStateSet, so
                                                              it holds every acknowledged put)
    ReplayState(end)        always                            state kept as records in the log
                                                              (consumer offsets) is applied up
                                                              to the end before writes resume
    AppendEpoch(E, end)     the last entry's epoch < E        the term opens at the
                                                              controller's epoch (a retried
                                                              take-over finds it there)
    FlushLog(end)           always                            the new master counts its own
                                                              copy from `end`: as durable as
                                                              a put's bytes (SYNC_FLUSH: the
                                                              flush thread fsyncs them)
    OpenTerm(E, end)        always                            start the master service of E
    LiftFence()             last                              writes are accepted

Refusal (no effect at all): the local epoch file ends past E, the controller's state went back
(RoleCore.check_take_over); the broker stays fenced and the shell retries.
"""

from __future__ import annotations

import dataclasses

from ha.replication.role_core import RoleCore
from storage_engine import EpochEntry

__all__ = [
    "AppendEpoch",
    "ConfirmTo",
    "CutTail",
    "FlushLog",
    "LiftFence",
    "OpenTerm",
    "ReplayState",
    "TakeOverEffect",
    "TakeOverLog",
    "TakeOverPlan",
    "plan_take_over",
]


@dataclasses.dataclass(frozen=True, slots=True)
class TakeOverLog:
    """What the store holds once the broker stopped following (read by the shell)."""

    log_position_end: int
    complete_log_position_end: int  # where the last whole record ends (<= end)
    epochs: tuple[EpochEntry, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CutTail:
    """Cut the log at `log_position` (bytes of a partial record go; so do the epoch entries
    that start at or after it); the confirm position comes down to it if it was above."""

    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConfirmTo:
    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayState:
    """Apply the state records in the log up to `log_position` (consumer offsets)."""

    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class AppendEpoch:
    epoch: int
    start_log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class FlushLog:
    """Make the log up to `log_position` as durable as a put's bytes (fsynced under
    SYNC_FLUSH) before the term counts the master's copy; a shell that cannot refuses the
    take-over (the broker stays fenced and tries again)."""

    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class OpenTerm:
    """Start the master service of `master_epoch`; the master holds the log to `log_position`
    (its confirm position is there too)."""

    master_epoch: int
    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class LiftFence:
    pass


TakeOverEffect = CutTail | ConfirmTo | ReplayState | AppendEpoch | FlushLog | OpenTerm | LiftFence


@dataclasses.dataclass(frozen=True, slots=True)
class TakeOverPlan:
    master_epoch: int
    effects: tuple[TakeOverEffect, ...]
    refusal: str | None = None  # set: no effect, the broker stays fenced


def plan_take_over(log: TakeOverLog, master_epoch: int) -> TakeOverPlan:
    """The steps that make `log` the start of `master_epoch`'s term (module docstring)."""
    last = log.epochs[-1].epoch if log.epochs else None
    refusal = RoleCore.check_take_over(last, master_epoch)
    if refusal is not None:
        return TakeOverPlan(master_epoch, (), refusal)
    assert log.complete_log_position_end <= log.log_position_end, log
    effects: list[TakeOverEffect] = []
    end = log.log_position_end
    epochs = log.epochs
    if log.complete_log_position_end < end:
        end = log.complete_log_position_end
        effects.append(CutTail(end))
        epochs = tuple(entry for entry in epochs if entry.start_log_position < end)
    effects.append(ConfirmTo(end))
    effects.append(ReplayState(end))
    if not epochs or epochs[-1].epoch < master_epoch:
        effects.append(AppendEpoch(master_epoch, end))
    effects += [FlushLog(end), OpenTerm(master_epoch, end), LiftFence()]
    return TakeOverPlan(master_epoch, tuple(effects))

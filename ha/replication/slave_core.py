"""Slave side of an HA link, as a sans-IO state machine: events in, effects out, time passed in.

    state diagram (one link at a time; the shell reconnects after CLOSED)

        IDLE --link_up--> HELLO_SENT --MasterHello, decision ok--> TRANSFER
          ^                   |                                      |
          |                   +--refused / bad frame--> CLOSED <-----+-- stale epoch, gap,
          +-------------------------- link_down --------------------+    silence, bad frame

On `link_up` the slave sends SlaveHello (identity, max log position, epoch entries). On the
master's MasterHello it decides where to start (`decide_start`, the seeds' cases):

    case                                            decision
    segment sizes differ                             refuse (physical replication needs them equal)
    master epoch older than one already seen        refuse (fencing: epochs only grow)
    empty log                                       follow from its end, or restart at the
                                                    master's min when outside [min, max]
    log ends below the master's min (far behind)    restart empty at the master's min
    data but no epoch entries, or no common epoch   refuse and report: never guess
    fork point (Epoch-StartOffset rule) < our end   truncate there (refused below confirm), follow
    otherwise (behind or equal)                     follow from our end

then acks the position it will receive from. In TRANSFER every Transfer must start exactly at
the slave's end and carry an epoch not older than the last local entry; a new data epoch appends
its (epoch, start) entry before the data. After each append the slave acks (after an fsync when
its store is SYNC_FLUSH, so an ack means durable), then dispatches ConsumeQueue entries (ack
first: the index can always be rebuilt from the log). It acks at least every
haSendHeartbeatInterval and closes the link when nothing arrived for haHousekeepingInterval.
The confirm position it takes is min(master's confirm, its own end), never lower than before.

Versions (conf/protocol.py): the hello carries this process's protocol version and the master's
hello its own; a pair the rule refuses is refused with its line (both ends check). Talking to a
0.1 master: v0.1.0 knows no version block and closes the link on a versioned hello without a
word (its decoder wants the exact body). So when a versioned hello meets such a close, the next
hello is a plain one (the master answers a plain hello with a plain hello, and a plain hello
means 0.1 to the rule); after any other end of a link the hello is versioned again. An
unreachable or overloaded master costs at most one plain attempt in two, which is harmless:
a 0.2 master answers a plain hello too.
"""

from __future__ import annotations

import dataclasses
import enum
import logging

from conf.protocol import DOCS_PAGE, LOCAL, PeerVersion, refusal
from ha.replication.frames import Ack, Frame, MasterHello, Metadata, Refuse, SlaveHello, Transfer
from storage_engine import EpochEntry, find_consistent_point

__all__ = [
    "AppendEpoch",
    "AppendLog",
    "ApplyMetadata",
    "CloseLink",
    "DispatchLog",
    "LocalLog",
    "MasterKnown",
    "RestartLogAt",
    "SendFrame",
    "SetConfirm",
    "SlaveEffect",
    "SlaveReplication",
    "SlaveState",
    "SlaveStats",
    "StartDecision",
    "Truncate",
    "decide_start",
]

logger = logging.getLogger(__name__)


class SlaveState(enum.Enum):
    IDLE = "IDLE"
    HELLO_SENT = "HELLO_SENT"
    TRANSFER = "TRANSFER"
    CLOSED = "CLOSED"


@dataclasses.dataclass(frozen=True, slots=True)
class LocalLog:
    """What the slave's store holds (read by the shell when the link comes up)."""

    min_log_position: int
    log_position_end: int
    confirm_log_position: int
    epochs: tuple[EpochEntry, ...]
    segment_size_bytes: int


# -- effects ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class SendFrame:
    frame: Frame


@dataclasses.dataclass(frozen=True, slots=True)
class Truncate:
    log_position: int  # cut the log, its index and epochs here (crash-safe)


@dataclasses.dataclass(frozen=True, slots=True)
class RestartLogAt:
    log_position: int  # drop the whole local log; it starts empty here (far behind)


@dataclasses.dataclass(frozen=True, slots=True)
class AppendEpoch:
    epoch: int
    start_log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class AppendLog:
    log_position: int
    data: bytes | memoryview
    fsync: bool  # make it durable before the ack that follows


@dataclasses.dataclass(frozen=True, slots=True)
class DispatchLog:
    """Index the complete records appended so far (ConsumeQueue entries)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SetConfirm:
    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyMetadata:
    version: int
    payload: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class MasterKnown:
    master_epoch: int
    endpoint: str
    broker_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class CloseLink:
    reason: str
    refused: bool = False  # a handshake refusal (reported to the operator), not a glitch


SlaveEffect = (SendFrame | Truncate | RestartLogAt | AppendEpoch | AppendLog | DispatchLog
               | SetConfirm | ApplyMetadata | MasterKnown | CloseLink)


@dataclasses.dataclass(frozen=True, slots=True)
class StartDecision:
    """Where to receive from: `action` is follow, truncate, restart or refuse."""

    action: str
    log_position: int
    reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class SlaveStats:
    state: SlaveState
    master_epoch: int
    master_endpoint: str
    log_position_end: int
    confirm_log_position: int
    last_refusal: str


def decide_start(local: LocalLog, hello: MasterHello, master_epoch_seen: int) -> StartDecision:
    """The handshake decision (pure): see the table in the module docstring."""
    if hello.segment_size_bytes != local.segment_size_bytes:
        return StartDecision("refuse", -1, f"CommitLog segment sizes differ (master "
                             f"{hello.segment_size_bytes}, slave {local.segment_size_bytes}): "
                             "set the same mappedFileSizeCommitLog on every replica")
    if hello.master_epoch < master_epoch_seen:
        return StartDecision("refuse", -1, f"master epoch {hello.master_epoch} is older than "
                             f"epoch {master_epoch_seen} already followed")
    end = local.log_position_end
    if end == local.min_log_position:  # empty log: nothing to reconcile
        if hello.min_log_position <= end <= hello.max_log_position:
            return StartDecision("follow", end)
        return StartDecision("restart", hello.min_log_position,
                             f"empty log at {end} outside the master's [{hello.min_log_position},"
                             f" {hello.max_log_position}]")
    if end < hello.min_log_position:
        return StartDecision("restart", hello.min_log_position, f"log ends at {end}, below the "
                             f"master's min {hello.min_log_position} (far behind)")
    if not local.epochs or not hello.epochs:
        holder = "slave" if not local.epochs else "master"
        return StartDecision("refuse", -1, f"no common epoch: the {holder} holds data without "
                             "epoch entries")
    point = find_consistent_point(local.epochs, end, hello.epochs, hello.max_log_position)
    if point < 0:
        return StartDecision("refuse", -1, f"no common epoch between slave {_show(local.epochs)} "
                             f"and master {_show(hello.epochs)}")
    if point < local.confirm_log_position:
        return StartDecision("refuse", -1, f"fork point {point} is below the slave's confirm "
                             f"position {local.confirm_log_position}: refusing to cut "
                             "confirmed data")
    if point < hello.min_log_position:
        return StartDecision("restart", hello.min_log_position, f"fork point {point} is below "
                             f"the master's min {hello.min_log_position}")
    if point < end:
        return StartDecision("truncate", point, f"log forked: cut {end - point} bytes after "
                             f"{point}")
    return StartDecision("follow", end)


def _show(epochs: tuple[EpochEntry, ...]) -> str:
    shown = ", ".join(f"<{e.epoch},{e.start_log_position}>" for e in epochs[-4:])
    return "{" + ("..., " if len(epochs) > 4 else "") + shown + "}"


class SlaveReplication:
    """One slave's link logic. Not thread-safe: the shell drives it from one thread."""

    def __init__(self, *, broker_id: int, heartbeat_interval_ms: int,
                 housekeeping_interval_ms: int, fsync_before_ack: bool,
                 master_epoch_min: int = 0, version: PeerVersion = LOCAL) -> None:
        """`master_epoch_min`: in controller mode, the epoch the controller named the master
        in; a master of an older epoch (a deposed one still running) is refused. `version`:
        this process's protocol version (conf/protocol.py)."""
        self.version = version
        self._plain_hello = False  # the next hello without the version block
        self._heard_since_hello = False
        self._sent_plain = False
        self._broker_id = broker_id
        self._heartbeat_ms = heartbeat_interval_ms
        self._housekeeping_ms = housekeeping_interval_ms
        self._fsync = fsync_before_ack
        self.state = SlaveState.IDLE
        self._master_epoch = master_epoch_min
        self._master_endpoint = ""
        self._local: LocalLog | None = None
        self._end = 0
        self._confirm = 0
        self._epochs: list[EpochEntry] = []
        self._last_received_ms = 0
        self._last_ack_ms = 0
        self._last_refusal = ""

    # -- events -----------------------------------------------------------------------------
    def link_up(self, local: LocalLog, *, now_ms: int) -> list[SlaveEffect]:
        assert self.state in (SlaveState.IDLE, SlaveState.CLOSED), self.state
        self._local = local
        self._end = local.log_position_end
        self._confirm = local.confirm_log_position
        self._epochs = list(local.epochs)
        self._last_received_ms = self._last_ack_ms = now_ms
        self.state = SlaveState.HELLO_SENT
        self._heard_since_hello = False
        self._sent_plain = self._plain_hello
        return [SendFrame(SlaveHello(
            self._broker_id, local.log_position_end, local.confirm_log_position,
            self._master_epoch, local.segment_size_bytes, local.epochs,
            "" if self._plain_hello else self.version.text()))]

    def link_down(self) -> None:
        # Talking to a 0.1 master (module docstring): one plain hello after a versioned one
        # met a close without a word; back to versioned after any other end of a link
        silent = self.state is SlaveState.HELLO_SENT and not self._heard_since_hello
        self._plain_hello = silent and not self._plain_hello
        if self._plain_hello:
            logger.warning("the master closed the HA link on a versioned hello without a word "
                           "(a 0.1 master does); the next hello is a 0.1 hello")
        self.state = SlaveState.IDLE

    def on_frame(self, frame: Frame, *, now_ms: int) -> list[SlaveEffect]:
        if self.state not in (SlaveState.HELLO_SENT, SlaveState.TRANSFER):
            return []
        self._last_received_ms = now_ms
        self._heard_since_hello = True
        if isinstance(frame, Refuse):
            return self._close(f"master refused: {frame.reason}", refused=True)
        if self.state is SlaveState.HELLO_SENT:
            if not isinstance(frame, MasterHello):
                return self._close(f"expected MasterHello, got {type(frame).__name__}")
            return self._on_hello(frame, now_ms)
        if isinstance(frame, Transfer):
            return self._on_transfer(frame, now_ms)
        if isinstance(frame, Metadata):
            return [ApplyMetadata(frame.version, frame.payload)]
        return self._close(f"unexpected {type(frame).__name__} while transferring")

    def on_tick(self, *, now_ms: int) -> list[SlaveEffect]:
        if self.state not in (SlaveState.HELLO_SENT, SlaveState.TRANSFER):
            return []
        if now_ms - self._last_received_ms >= self._housekeeping_ms:
            return self._close(f"nothing from the master for {now_ms - self._last_received_ms} "
                               "ms (haHousekeepingInterval)")
        if self.state is SlaveState.TRANSFER and now_ms - self._last_ack_ms >= self._heartbeat_ms:
            self._last_ack_ms = now_ms
            return [SendFrame(Ack(self._end))]
        return []

    # -- handlers ---------------------------------------------------------------------------
    def _on_hello(self, hello: MasterHello, now_ms: int) -> list[SlaveEffect]:
        assert self._local is not None
        refused = refusal(self.version, hello.version, "HA link to the master")
        if refused is not None and self._sent_plain and not hello.version:
            refused = (f"HA link to the master refused: it answered a 0.1 hello (sent after a "
                       f"silent close) without a version: a 0.1 master, or a newer one "
                       f"answering in kind; this process speaks {self.version.describe()}; see "
                       f"{DOCS_PAGE}")
        if refused is not None:
            self._last_refusal = refused
            return [SendFrame(Refuse(refused)), *self._close(refused, refused=True)]
        decision = decide_start(self._local, hello, self._master_epoch)
        if decision.action == "refuse":
            self._last_refusal = decision.reason
            effects: list[SlaveEffect] = [SendFrame(Refuse(decision.reason))]
            return effects + self._close(decision.reason, refused=True)
        effects = [MasterKnown(hello.master_epoch, hello.endpoint, hello.broker_id)]
        self._master_epoch = hello.master_epoch
        self._master_endpoint = hello.endpoint
        if decision.action == "truncate":
            effects.append(Truncate(decision.log_position))
            self._epochs = [e for e in self._epochs if e.start_log_position < decision.log_position]
        elif decision.action == "restart":
            effects.append(RestartLogAt(decision.log_position))
            self._epochs = []
            self._confirm = decision.log_position
        if decision.reason:
            logger.warning("handshake with master e%d: %s", hello.master_epoch, decision.reason)
        self._end = decision.log_position
        self._last_refusal = ""
        self.state = SlaveState.TRANSFER
        self._last_ack_ms = now_ms
        effects.append(SendFrame(Ack(self._end)))
        return effects

    def _on_transfer(self, frame: Transfer, now_ms: int) -> list[SlaveEffect]:
        if frame.master_epoch < self._master_epoch:
            return self._close(f"transfer from master epoch {frame.master_epoch} after epoch "
                               f"{self._master_epoch}: stale master")
        self._master_epoch = frame.master_epoch
        effects: list[SlaveEffect] = []
        size = len(frame.data)
        if size:
            if frame.log_position != self._end:
                return self._close(f"transfer starts at {frame.log_position}, log ends at "
                                   f"{self._end}")
            epoch_effects = self._check_epoch(frame)
            if epoch_effects is None:
                return self._close(f"transfer of epoch <{frame.data_epoch},"
                                   f"{frame.data_epoch_start}> at {frame.log_position} does not "
                                   f"follow local epochs {_show(tuple(self._epochs))}")
            effects += epoch_effects
            effects.append(AppendLog(frame.log_position, frame.data, self._fsync))
            self._end += size
            self._last_ack_ms = now_ms
            effects.append(SendFrame(Ack(self._end)))
            effects.append(DispatchLog())
        elif now_ms - self._last_ack_ms >= self._heartbeat_ms:
            self._last_ack_ms = now_ms
            effects.append(SendFrame(Ack(self._end)))
        confirm = min(frame.confirm_log_position, self._end)
        if confirm > self._confirm:
            self._confirm = confirm
            effects.append(SetConfirm(confirm))
        return effects

    def _check_epoch(self, frame: Transfer) -> list[SlaveEffect] | None:
        """[] when the data continues the last local epoch, [AppendEpoch] when it opens a newer
        one, None when it contradicts the local entries."""
        last = self._epochs[-1] if self._epochs else None
        if last is not None and frame.data_epoch == last.epoch:
            return [] if frame.data_epoch_start == last.start_log_position else None
        if last is not None and (frame.data_epoch < last.epoch
                                 or frame.data_epoch_start < last.start_log_position):
            return None
        if frame.data_epoch_start > frame.log_position:
            return None
        entry = EpochEntry(frame.data_epoch, frame.data_epoch_start)
        self._epochs.append(entry)
        return [AppendEpoch(entry.epoch, entry.start_log_position)]

    def _close(self, reason: str, *, refused: bool = False) -> list[SlaveEffect]:
        self.state = SlaveState.CLOSED
        if refused:
            self._last_refusal = reason
        return [CloseLink(reason, refused)]

    def stats(self) -> SlaveStats:
        return SlaveStats(self.state, self._master_epoch, self._master_endpoint, self._end,
                          self._confirm, self._last_refusal)

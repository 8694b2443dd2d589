"""Master side of replication, as a sans-IO state machine: events in, effects out, time passed in.

One `MasterReplication` exists per master term (its `master_epoch`); it owns every slave link's
state, the SyncStateSet (SSS) and the confirm position. The shell serializes calls under one lock.

    link states

        HANDSHAKE --SlaveHello--> WAIT_START --first Ack (start position)--> TRANSFER
            |                        |                                          |
            +--bad frame, stale ---->+------> closed <--- silent for haHousekeepingInterval,
               epoch, refusal                               ack outside what was sent

What the master ships (`next_send`): from the link's next position, one batch of at most
haTransferBatchSize that never crosses an epoch boundary (next epoch entry's start) or a segment
boundary (records never span segments; each batch is one slice of one file), carrying the
master epoch (fencing token), the data's epoch and epoch start, and the confirm position. With
nothing to ship it sends an empty Transfer (heartbeat) every haSendHeartbeatInterval, and
CONFIRM_PUSH_DELAY_MS after its last send when the confirm position moved since the link last
heard it (slaves bound their reads by it; under steady produce the next batch carries it, which
saves a wake-up on both ends per batch).
Topic and offset metadata go out when their version changed, at most every haMetadataSyncInterval.

SyncStateSet (master always in it):
- join, on an ack: the slave's ack >= the confirm position and >= the start of the current epoch;
- candidate: a slave not yet in the set that keeps up (its ack reached the log end as of the
  last send to it, or is less than one transfer batch behind the log end) bounds the confirm
  position like a member, so the position stops running ahead of it and it can join under continuous load (else the confirm position, which follows the
  master's writes while it is alone, stays ahead of every ack); a candidate not caught up for
  haMaxTimeSlaveNotCatchup, or whose link closes, stops being one;
- leave: its link closes (at once), or it has not kept up (as above) for
  haMaxTimeSlaveNotCatchup.
Quorum and confirm arithmetic: ha/replication/quorum.py; the confirm position is the minimum over the master
and the SSS members, for both master roles, brought down to the end of a put (each
`local_durable` position is one): a slave acks what it received, which may end inside a put,
and a confirm position inside a put would let readers see its first rows, which a new master
holding only those rows must then keep (MessageStore.complete_log_position_end) and the
producer's retry would store again. ASYNC_MASTER never makes a put wait (its reads still
stop at the confirm position, so a slave that may be elected later holds whatever was read).

Controller mode (`accepted_sync_state_set` given): the set above is only this master's proposal
(`local_sync_state_set`, sent to the controller by the shell); the controller elects from the set
it accepted, so the two sets play different parts until they agree:

    needAckNums                    from the accepted set's size (quorum.plan_put_controller): a
                                   master that lost its slaves cannot degrade on its own say-so
                                   (it may be deposed already: its acks would be cut later)
    acks that count for a put      local members that the controller accepted (intersection):
                                   an ack from a member the controller does not know yet could
                                   make a put PUT_OK that an election then loses
    confirm position               minimum over the master, the local members and the accepted
                                   members (union): any accepted member may be elected; one
                                   without a link holds the confirm position where it is until
                                   the controller accepts a set without it (RocketMQ keeps the
                                   old value too)

Proposals in flight (`proposing(members, sync_state_set_epoch)`, called by the shell before it
sends one): until the controller's set moves past the epoch a proposal carried, the controller
may still commit it (a reply lost, a request delayed, a Raft entry committed by the next
leader), and then elect any of its members. So the slaves of every proposal not yet overtaken
count like accepted members (RocketMQ's "synchronizing" union): in the in-sync size, in the
confirm position (one without a link holds it), and with allAckInSyncStateSet for every ack (one
without a link holds the put). Found by the cluster simulation (seeds 214, 235): a proposal
adding slaves was in flight when their links closed; the master, alone in its local and accepted
set, acked alone; the controller then accepted the proposal and elected one of those slaves,
which lacked the acks. A proposal is overtaken once the master adopts a set of a newer epoch;
`proposal_pending()` tells the shell to make that happen (re-propose the local set, which the
controller accepts as an epoch bump even when it equals the set it holds) when nothing else will.

Master lease (controller mode, DESIGN §5.7): `lease_until_ms` is renewed by every controller
heartbeat reply that names this broker master of this epoch, to the heartbeat's *send* time plus
the lease (shorter than the controller's controllerHeartbeatTimeoutMs, which it waits after the
last heartbeat it received before it elects another master). While the lease holds, a put is
DONE under the rule above. Once it has lapsed (the process was paused, or the controller has not
answered for a while: this master may have been replaced without knowing), a put is DONE only
when every slave of the accepted set and of the local set holds it: whichever of them an
election picks took the put with it, since a slave stops following before it takes over. So a
resumed or cut-off master acknowledges nothing that a new master lacks, and a healthy replica
set with every slave linked keeps acking while no controller answers (DESIGN §5.6). The lease
is read at the moment a put is answered (`now_ms`), so a put planned before a pause and answered
after it is judged after it.
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import logging

from ha.replication.frames import Ack, Frame, MasterHello, Refuse, SlaveHello, Transfer
from ha.replication.quorum import (
    PutPlan,
    QuorumSettings,
    confirm_position,
    holders,
    plan_put,
    plan_put_controller,
)
from storage_engine import EpochEntry

__all__ = [
    "SHIP_FROM_PUT_BYTES_MAX",
    "CloseLink",
    "ConfirmTo",
    "LinkState",
    "LinkStats",
    "MasterEffect",
    "MasterLog",
    "MasterReplication",
    "MasterSettings",
    "MasterStats",
    "PutProgress",
    "SendFrame",
    "SendLog",
    "SendMetadata",
    "SyncStateSetChanged",
    "Wait",
]

logger = logging.getLogger(__name__)

PUT_ENDS_MAX = 1 << 20  # put ends remembered above the confirm position (module docstring)
CONFIRM_PUSH_DELAY_MS = 5  # a confirm move waits this long after the last send for data to carry it
# A put's own thread ships a link's unsent bytes when they are at most this many (its put's
# bytes, maybe a few more): `next_send_idle`
SHIP_FROM_PUT_BYTES_MAX = 64 << 10


class LinkState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    WAIT_START = "WAIT_START"
    TRANSFER = "TRANSFER"
    CLOSED = "CLOSED"


class PutProgress(enum.Enum):
    DONE = "DONE"  # `need` replicas hold it
    WAITING = "WAITING"
    UNREACHABLE = "UNREACHABLE"  # fewer replicas can still ack than needed: SLAVE_NOT_AVAILABLE


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MasterSettings:
    quorum: QuorumSettings
    async_master: bool = False
    transfer_batch_bytes: int = 4 << 20
    heartbeat_interval_ms: int = 5000
    housekeeping_interval_ms: int = 20_000
    slave_not_catchup_max_ms: int = 15_000
    metadata_sync_interval_ms: int = 1000
    segment_size_bytes: int = 1 << 30
    links_max: int = 16


@dataclasses.dataclass(frozen=True, slots=True)
class MasterLog:
    """What the master's store holds right now (read by the shell, passed in)."""

    min_log_position: int
    log_position_end: int
    epochs: tuple[EpochEntry, ...]
    metadata_version: int = 0


# -- effects ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class SendFrame:
    link_id: int
    frame: Frame


@dataclasses.dataclass(frozen=True, slots=True)
class SendLog:
    """Ship [transfer.log_position, + size_bytes) of the CommitLog under `transfer`'s header."""

    link_id: int
    transfer: Transfer
    size_bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class SendMetadata:
    link_id: int
    version: int


@dataclasses.dataclass(frozen=True, slots=True)
class Wait:
    wait_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class CloseLink:
    link_id: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class ConfirmTo:
    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class SyncStateSetChanged:
    members: tuple[int, ...]  # broker ids, master first


MasterEffect = SendFrame | SendLog | SendMetadata | Wait | CloseLink | ConfirmTo \
    | SyncStateSetChanged


@dataclasses.dataclass(frozen=True, slots=True)
class LinkStats:
    link_id: int
    broker_id: int
    state: str
    acked_log_position: int
    next_log_position: int
    in_sync_state_set: bool
    last_caught_up_ms: int = -1  # the master's monotonic ms when it last held the log's end


@dataclasses.dataclass(frozen=True, slots=True)
class MasterStats:
    master_epoch: int
    confirm_log_position: int
    master_log_position: int
    sync_state_set: tuple[int, ...]
    need_ack_nums: int
    in_sync_replicas: int
    links: tuple[LinkStats, ...]
    accepted_sync_state_set: tuple[int, ...] | None = None  # controller mode
    lease_until_ms: int | None = None  # controller mode: acks need every slave after this


@dataclasses.dataclass(slots=True)
class _Link:
    link_id: int
    opened_ms: int
    state: LinkState = LinkState.HANDSHAKE
    broker_id: int = -1
    next_log_position: int = -1
    acked_log_position: int = -1
    last_received_ms: int = 0
    last_sent_ms: int = 0
    end_at_last_send: int = -1
    confirm_sent: int = -1
    last_caught_up_ms: int = 0
    metadata_version_sent: int = 0  # versions start at 1: 0 = nothing to send
    metadata_sent_ms: int = -(1 << 62)


class MasterReplication:
    """The master's replication decisions for one term. Not thread-safe (the shell locks)."""

    def __init__(self, settings: MasterSettings, *, broker_id: int, master_epoch: int,
                 endpoint: str, master_log_position: int, confirm_log_position: int,
                 now_ms: int, accepted_sync_state_set: tuple[int, ...] | None = None,
                 accepted_sync_state_set_epoch: int = 0,
                 lease_until_ms: int | None = None) -> None:
        self.settings = settings
        self.broker_id = broker_id
        self.master_epoch = master_epoch
        self.endpoint = endpoint
        self._links: dict[int, _Link] = {}
        self._members: set[int] = set()  # SSS slaves, by broker id
        self._candidates: set[int] = set()  # caught-up slaves about to join (bound confirm)
        self._by_broker: dict[int, int] = {}  # broker id -> link id
        self._master_position = master_log_position
        self._confirm = confirm_log_position
        self._put_ends: list[int] = []  # sorted ends of this term's puts above the confirm
        # The highest put end answered DONE: a slave joins the SyncStateSet only holding it.
        self._acked_high = confirm_log_position
        self._epoch_start = 0
        self._created_ms = now_ms
        # Controller mode: the slaves of the SyncStateSet the controller accepted (None: static
        # roles, the local set is authoritative).
        self._accepted: frozenset[int] | None = None
        if accepted_sync_state_set is not None:
            self._accepted = frozenset(accepted_sync_state_set) - {broker_id}
        self._accepted_epoch = accepted_sync_state_set_epoch
        # Controller mode: slaves of proposals not yet overtaken, by the SyncStateSet epoch the
        # proposal carried (module docstring, "Proposals in flight").
        # sync_state_set_epoch -> the slave sets of the proposals made at it, each exactly
        self._proposed: dict[int, set[frozenset[int]]] = {}
        # Controller mode: the master lease (module docstring); None: no lease (static roles).
        self._lease_until_ms = lease_until_ms

    # -- links ------------------------------------------------------------------------------
    def link_opened(self, link_id: int, *, now_ms: int) -> list[MasterEffect]:
        assert link_id not in self._links, link_id
        live = sum(1 for link in self._links.values() if link.state is not LinkState.CLOSED)
        self._links[link_id] = _Link(link_id, now_ms, last_received_ms=now_ms,
                                     last_sent_ms=now_ms)
        if live >= self.settings.links_max:
            return self._close(link_id, f"{live} links open (haConnectionsMax)")
        return []

    def link_closed(self, link_id: int, *, now_ms: int) -> list[MasterEffect]:
        """The shell saw the link end (idempotent)."""
        link = self._links.pop(link_id, None)
        if link is None:
            return []
        return self._drop_member_of(link, now_ms)

    def on_frame(self, link_id: int, frame: Frame, log: MasterLog, *, now_ms: int
                 ) -> list[MasterEffect]:
        link = self._links.get(link_id)
        if link is None or link.state is LinkState.CLOSED:
            return []
        link.last_received_ms = now_ms
        if isinstance(frame, Refuse):
            return self._close(link_id, f"slave refused: {frame.reason}")
        if link.state is LinkState.HANDSHAKE:
            if not isinstance(frame, SlaveHello):
                return self._close(link_id, f"expected SlaveHello, got {type(frame).__name__}")
            return self._on_hello(link, frame, log)
        if not isinstance(frame, Ack):
            return self._close(link_id, f"unexpected {type(frame).__name__} from a slave")
        if link.state is LinkState.WAIT_START:
            return self._on_start(link, frame.log_position, log, now_ms)
        return self._on_ack(link, frame.log_position, log, now_ms)

    def _on_hello(self, link: _Link, hello: SlaveHello, log: MasterLog) -> list[MasterEffect]:
        if hello.master_epoch_seen > self.master_epoch:
            reason = (f"slave {hello.broker_id} already followed master epoch "
                      f"{hello.master_epoch_seen} > this master's {self.master_epoch}")
            return [SendFrame(link.link_id, Refuse(reason))] + self._close(link.link_id, reason)
        effects: list[MasterEffect] = []
        previous = self._by_broker.get(hello.broker_id)
        if previous is not None and previous != link.link_id and previous in self._links:
            effects += self._close(previous, f"slave {hello.broker_id} reconnected")
        self._by_broker[hello.broker_id] = link.link_id
        link.broker_id = hello.broker_id
        link.state = LinkState.WAIT_START
        effects.append(SendFrame(link.link_id, MasterHello(
            self.broker_id, self.master_epoch, log.min_log_position, log.log_position_end,
            self._confirm, self.settings.segment_size_bytes, self.endpoint, log.epochs)))
        return effects

    def _on_start(self, link: _Link, position: int, log: MasterLog, now_ms: int
                  ) -> list[MasterEffect]:
        if not log.min_log_position <= position <= log.log_position_end:
            reason = (f"slave {link.broker_id} would start at {position}, outside the master's "
                      f"log [{log.min_log_position}, {log.log_position_end}]")
            return [SendFrame(link.link_id, Refuse(reason))] + self._close(link.link_id, reason)
        link.state = LinkState.TRANSFER
        link.next_log_position = position
        link.acked_log_position = position
        link.end_at_last_send = log.log_position_end
        link.last_caught_up_ms = now_ms if position >= log.log_position_end else link.opened_ms
        logger.info("slave %d links at log_position %d (master end %d)", link.broker_id,
                    position, log.log_position_end)
        return self._after_ack(link, log, now_ms)

    def _on_ack(self, link: _Link, position: int, log: MasterLog, now_ms: int
                ) -> list[MasterEffect]:
        if not link.acked_log_position <= position <= link.next_log_position:
            return self._close(link.link_id, f"slave {link.broker_id} acked {position}, outside "
                               f"[{link.acked_log_position}, {link.next_log_position}]")
        link.acked_log_position = position
        return self._after_ack(link, log, now_ms)

    def _after_ack(self, link: _Link, log: MasterLog, now_ms: int) -> list[MasterEffect]:
        position = link.acked_log_position
        caught_up = self._caught_up(link, position, log)
        if caught_up:
            link.last_caught_up_ms = now_ms
        effects: list[MasterEffect] = []
        self._epoch_start = log.epochs[-1].start_log_position if log.epochs else 0
        if link.broker_id not in self._members:
            if (position >= self._confirm and position >= self._epoch_start
                    and position >= self._acked_high):
                self._candidates.discard(link.broker_id)
                self._members.add(link.broker_id)
                logger.info("slave %d joins the SyncStateSet at log_position %d",
                            link.broker_id, position)
                effects.append(SyncStateSetChanged(self.sync_state_set))
            elif caught_up and position >= self._epoch_start:
                self._candidates.add(link.broker_id)
        return effects + self._recompute_confirm()

    def _caught_up(self, link: _Link, position: int, log: MasterLog) -> bool:
        """Does a slave that acked `position` keep up? It holds all the master had when it last
        shipped to it, or it is less than one transfer batch behind the log's end (under
        continuous writes the next batch is always on its way before the last one is acked)."""
        return (position >= link.end_at_last_send
                or log.log_position_end - position <= self.settings.transfer_batch_bytes)

    # -- shipping ---------------------------------------------------------------------------
    def next_send(self, link_id: int, log: MasterLog, *, now_ms: int) -> MasterEffect:
        """What the link's sender should do now: SendLog, SendFrame (heartbeat), SendMetadata
        or Wait."""
        link = self._links.get(link_id)
        if link is None or link.state is not LinkState.TRANSFER:
            return Wait(self.settings.heartbeat_interval_ms)
        interval = self.settings.metadata_sync_interval_ms
        if (log.metadata_version != link.metadata_version_sent
                and now_ms - link.metadata_sent_ms >= interval):
            link.metadata_version_sent = log.metadata_version
            link.metadata_sent_ms = now_ms
            return SendMetadata(link_id, log.metadata_version)
        position = link.next_log_position
        if position < log.log_position_end:
            transfer, size = self._batch(position, log)
            link.next_log_position = position + size
            self._sent(link, log, now_ms)
            return SendLog(link_id, transfer, size)
        heartbeat_due_ms = link.last_sent_ms + self.settings.heartbeat_interval_ms
        if self._confirm > link.confirm_sent:  # push it soon, unless data carries it first
            heartbeat_due_ms = min(heartbeat_due_ms, link.last_sent_ms + CONFIRM_PUSH_DELAY_MS)
        if now_ms >= heartbeat_due_ms:
            epoch = log.epochs[-1] if log.epochs else EpochEntry(0, log.min_log_position)
            self._sent(link, log, now_ms)
            return SendFrame(link_id, Transfer(self.master_epoch, epoch.epoch,
                                               epoch.start_log_position, self._confirm, position))
        wait_ms = heartbeat_due_ms - now_ms
        if log.metadata_version != link.metadata_version_sent:
            wait_ms = min(wait_ms, link.metadata_sent_ms + interval - now_ms)
        return Wait(max(1, wait_ms))

    def _sent(self, link: _Link, log: MasterLog, now_ms: int) -> None:
        link.end_at_last_send = log.log_position_end
        link.confirm_sent = self._confirm
        link.last_sent_ms = now_ms

    def _batch(self, position: int, log: MasterLog) -> tuple[Transfer, int]:
        """The next batch from `position`: bounded by the batch size, the epoch, the segment."""
        epochs = log.epochs
        index = bisect.bisect_right([e.start_log_position for e in epochs], position) - 1
        if index < 0:  # data older than every epoch entry: the master's first term
            epoch = EpochEntry(0, log.min_log_position)
            epoch_end = epochs[0].start_log_position if epochs else log.log_position_end
        else:
            epoch = epochs[index]
            epoch_end = (epochs[index + 1].start_log_position if index + 1 < len(epochs)
                         else log.log_position_end)
        segment = self.settings.segment_size_bytes
        segment_end = (position // segment + 1) * segment
        size = min(self.settings.transfer_batch_bytes, epoch_end - position,
                   segment_end - position, log.log_position_end - position)
        assert size > 0, (position, epoch_end, segment_end, log.log_position_end)
        return Transfer(self.master_epoch, epoch.epoch, epoch.start_log_position, self._confirm,
                        position), size

    def next_send_idle(self, link_id: int, log: MasterLog, *, now_ms: int) -> SendLog | None:
        """The log's new bytes for a link whose unsent tail is small (at most
        SHIP_FROM_PUT_BYTES_MAX: the put's own bytes, maybe a few more), so a put's own thread
        may ship them at once instead of waking the link's sender (a thread hand-off on every
        acknowledged put's path); None for a link in any other state (not in TRANSFER, far
        behind, metadata due, nothing new): its sender decides, as always. A few bytes in
        flight do not matter: a slave a put or two behind (its ack on the way; under load, the
        slower slave most of the time) gets the next put's bytes pipelined, as its sender
        would send them, where waking that sender woke every sender of the set for it (~1.3
        wake-ups per put counted at load 21, each ~20 us of the master's CPU). More than
        SHIP_FROM_PUT_BYTES_MAX in flight (a paused or slow slave) is its sender's: a put's
        thread never waits for a slave's socket to drain. A SendLog returned here is
        accounted as next_send's would be."""
        link = self._links.get(link_id)
        if (link is None or link.state is not LinkState.TRANSFER
                or link.next_log_position >= log.log_position_end
                or log.log_position_end - link.next_log_position > SHIP_FROM_PUT_BYTES_MAX
                or link.next_log_position - link.acked_log_position > SHIP_FROM_PUT_BYTES_MAX
                or log.metadata_version != link.metadata_version_sent):
            return None
        effect = self.next_send(link_id, log, now_ms=now_ms)
        assert isinstance(effect, SendLog), effect
        return effect

    # -- time -------------------------------------------------------------------------------
    def on_tick(self, log: MasterLog, *, now_ms: int) -> list[MasterEffect]:
        """Close silent links; drop SSS members that did not catch up in time."""
        effects: list[MasterEffect] = []
        for link in list(self._links.values()):
            if link.state is LinkState.CLOSED:
                continue
            silent_ms = now_ms - link.last_received_ms
            if link.state is LinkState.TRANSFER and \
                    self._caught_up(link, link.acked_log_position, log):
                link.last_caught_up_ms = now_ms  # caught up, however quiet
            if silent_ms >= self.settings.housekeeping_interval_ms:
                effects += self._close(link.link_id, f"slave {link.broker_id} silent for "
                                       f"{silent_ms} ms (haHousekeepingInterval)")
            elif (link.broker_id in self._candidates and now_ms - link.last_caught_up_ms
                  > self.settings.slave_not_catchup_max_ms):
                self._candidates.discard(link.broker_id)  # it no longer holds confirm back
            elif (link.broker_id in self._members and now_ms - link.last_caught_up_ms
                  > self.settings.slave_not_catchup_max_ms):
                self._members.discard(link.broker_id)
                logger.warning("slave %d leaves the SyncStateSet: not caught up for %d ms "
                               "(acked %d, master end %d)", link.broker_id,
                               now_ms - link.last_caught_up_ms, link.acked_log_position,
                               log.log_position_end)
                effects.append(SyncStateSetChanged(self.sync_state_set))
        return effects + self._recompute_confirm()

    # -- puts -------------------------------------------------------------------------------
    def plan_put(self, master_end: int) -> PutPlan:
        """needAckNums for a put about to be written, or why it is refused."""
        if self.settings.async_master:
            return PutPlan(1, 1)
        if self._accepted is not None:
            electable = self._accepted
            if not self.settings.quorum.all_ack_in_sync_state_set:
                # a proposal in flight may be committed: the in-sync size counts its slaves
                # (RocketMQ's union while synchronizing); with allAckInSyncStateSet they must
                # hold every put instead (`_held_by_joining`)
                electable = electable | self._in_flight()
            return plan_put_controller(self.settings.quorum, 1 + len(electable))
        return plan_put(self.settings.quorum, master_end, self._counted_acks())

    def local_durable(self, log_position: int) -> list[MasterEffect]:
        """The master itself holds everything below `log_position` (written or fsynced): the
        end of a put (a concurrent put's may come later than a higher one)."""
        if log_position > self._confirm:
            bisect.insort(self._put_ends, log_position)
            if len(self._put_ends) > PUT_ENDS_MAX:  # the confirm stops at the ends kept only
                del self._put_ends[0]
        if log_position <= self._master_position:
            return self._recompute_confirm() if log_position > self._confirm else []
        self._master_position = log_position
        return self._recompute_confirm()

    def renew_lease(self, until_ms: int) -> None:
        """The controller confirmed this master of its epoch: the lease holds until `until_ms`
        (never shortened: an older confirmation may be answered later than a newer one)."""
        assert self._lease_until_ms is not None, "no lease without a controller"
        self._lease_until_ms = max(self._lease_until_ms, until_ms)

    def lease_lapsed(self, now_ms: int) -> bool:
        return self._lease_until_ms is not None and now_ms >= self._lease_until_ms

    def put_progress(self, log_position: int, need: int, *, now_ms: int) -> PutProgress:
        """Is a put ending at `log_position` that needs `need` replicas done now?"""
        if self.lease_lapsed(now_ms):  # maybe replaced: only a put every slave holds is safe
            if self._held_by_every_slave(log_position):
                return self._done(log_position)
            return PutProgress.WAITING  # until a renewed lease, the acks, or the deadline
        acks = self._counted_acks()
        if not self.settings.async_master:
            # the need of the set in force now, not only of the set the put was planned under:
            # a member that joined meanwhile may be elected (cluster simulation: allAck seed 3;
            # auto-isr seed 165, a put planned alone with need 1 answered after a slave had
            # been accepted, and lost with the master)
            if self._accepted is not None:
                need = max(need, self.plan_put(self._master_position).need)
            elif self.settings.quorum.all_ack_in_sync_state_set:
                need = max(need, 1 + len(self._members))
        if holders(log_position, self._master_position, acks) >= need:
            if not self._held_by_joining(log_position):
                return PutProgress.WAITING  # a joining slave first (or it stops joining)
            if not self._held_by_proposals(log_position):
                return PutProgress.WAITING  # the need of a set the controller may commit
            return self._done(log_position)
        if 1 + len(acks) + len(self._in_flight()) < need:
            return PutProgress.UNREACHABLE  # (a slave in flight counts once it is accepted)
        return PutProgress.WAITING

    def _done(self, log_position: int) -> PutProgress:
        self._acked_high = max(self._acked_high, log_position)
        return PutProgress.DONE

    def _held_by_joining(self, log_position: int) -> bool:
        """Slaves on their way into the SyncStateSet (candidates; in controller mode local
        members the controller has not accepted yet, and slaves of proposals in flight) hold
        everything below `log_position`. A member may be elected, so every rule promises that
        a slave joins only holding all acked so far (`_acked_high`), and while it joins no put
        is acknowledged without it (RocketMQ counts the growing local set the same way).
        Found by the cluster simulation: with allAckInSyncStateSet (seeds 3, 15, 30, 66, 73 of
        the first fault model), a master alone in its set acked puts that a slave, joining at
        the confirm position it held back as a candidate, lacked; elected after the master
        died, it lost them. With inSyncReplicas=2 and enableAutoInSyncReplicas (`--quorum
        auto-isr`, seeds 3, ...): the same, through the degraded need of a master alone, and
        a put planned alone (need 1) answered after a slave had joined. A slave that never
        catches up is no candidate for long (haMaxTimeSlaveNotCatchup), so puts wait at most
        that long for it. ASYNC_MASTER never waits."""
        if self.settings.async_master:
            return True
        joining = set(self._candidates)
        if self._accepted is not None:
            joining |= (self._members | self._in_flight()) - self._accepted
        for broker_id in joining:
            ack = self._ack_of(broker_id)
            if ack is None or ack < log_position:  # None: a proposed slave without a link
                return False
        return True

    def _held_by_proposals(self, log_position: int) -> bool:
        """Every proposal not yet overtaken, which the controller may still commit and then
        elect from, holds the put under its own need, counting its own members only. A
        shrink's members are all in the accepted set, so the need of the accepted set alone
        did not cover it: found by the cluster simulation (`--quorum auto-isr --partial` seed
        3182): master b4 with the accepted set {b4, b6, b5} proposed {b4, b5}, then acked a
        put on b6's ack (need 2 of 3); the controller committed {b4, b5}, b4 crashed, and b5,
        elected, lacked the put. With allAckInSyncStateSet every slave of a proposal already
        holds every put (the accepted set's, or `_held_by_joining`)."""
        if self.settings.async_master or self._accepted is None or not self._proposed:
            return True
        for proposals in self._proposed.values():
            for slaves in proposals:
                acks = [ack for ack in map(self._ack_of, slaves) if ack is not None]
                need = plan_put_controller(self.settings.quorum, 1 + len(slaves)).need
                if holders(log_position, self._master_position, acks) < need:
                    return False
        return True

    def _held_by_every_slave(self, log_position: int) -> bool:
        """The master and every slave an election could pick (accepted or local members) hold
        everything below `log_position`."""
        if self._master_position < log_position:
            return False
        slaves = self._members | (self._accepted or frozenset()) | self._in_flight()
        acks = [self._ack_of(broker_id) for broker_id in slaves]
        return all(ack is not None and ack >= log_position for ack in acks)

    # -- confirm and SSS --------------------------------------------------------------------
    def _ack_of(self, broker_id: int) -> int | None:
        """The acked position of a slave with a link in TRANSFER (None: no such link)."""
        link = self._links.get(self._by_broker.get(broker_id, -1))
        if link is None or link.state is not LinkState.TRANSFER:
            return None
        return link.acked_log_position

    def _counted_acks(self) -> list[int]:
        """Acks of the members whose ack counts towards a put's quorum."""
        members = self._members if self._accepted is None else self._members & self._accepted
        acks = [self._ack_of(broker_id) for broker_id in members]
        assert None not in acks, members  # a member leaves the set when its link closes
        return acks  # type: ignore[return-value]

    def _recompute_confirm(self) -> list[MasterEffect]:
        bound = (self._members | self._candidates | (self._accepted or frozenset())
                 | self._in_flight())
        acks = [self._ack_of(broker_id) for broker_id in bound]
        if None in acks:
            return []  # an accepted member without a link: hold until the controller drops it
        confirm = confirm_position(self._master_position, acks, self._confirm)  # type: ignore[arg-type]
        ends = bisect.bisect_right(self._put_ends, confirm)
        if ends:  # the last put end at or below it (none: it stays where it is)
            confirm = self._put_ends[ends - 1]
            del self._put_ends[:ends]
        elif self._put_ends:
            confirm = self._confirm
        if confirm > self._confirm:
            self._confirm = confirm
            return [ConfirmTo(confirm)]
        return []

    def _drop_member_of(self, link: _Link, now_ms: int) -> list[MasterEffect]:
        if self._by_broker.get(link.broker_id) == link.link_id:
            del self._by_broker[link.broker_id]
            self._candidates.discard(link.broker_id)
            if link.broker_id in self._members:
                self._members.discard(link.broker_id)
                logger.warning("slave %d leaves the SyncStateSet: link closed", link.broker_id)
                return [SyncStateSetChanged(self.sync_state_set)]
        return []

    def _close(self, link_id: int, reason: str) -> list[MasterEffect]:
        link = self._links.get(link_id)
        if link is None or link.state is LinkState.CLOSED:
            return []
        effects = self._drop_member_of(link, 0)
        link.state = LinkState.CLOSED
        logger.warning("closing HA link %d (slave %d): %s", link_id, link.broker_id, reason)
        return [*effects, CloseLink(link_id, reason)]

    @property
    def confirm_log_position(self) -> int:
        return self._confirm

    @property
    def sync_state_set(self) -> tuple[int, ...]:
        """The local SyncStateSet (in controller mode: the set to propose), master first."""
        return (self.broker_id, *sorted(self._members))

    @property
    def accepted_sync_state_set(self) -> tuple[int, ...] | None:
        """The set the controller accepted, master first (None: static roles)."""
        if self._accepted is None:
            return None
        return (self.broker_id, *sorted(self._accepted))

    def accept_sync_state_set(self, members: tuple[int, ...],
                              sync_state_set_epoch: int | None = None) -> list[MasterEffect]:
        """Controller mode: the controller now holds `members` as the SyncStateSet, at
        `sync_state_set_epoch` (None: the epoch after the one in use). Proposals made at an
        older epoch can no longer be committed: they stop counting."""
        assert self._accepted is not None, "static roles have no accepted set"
        epoch = self._accepted_epoch + 1 if sync_state_set_epoch is None else sync_state_set_epoch
        assert epoch > self._accepted_epoch, (epoch, self._accepted_epoch)
        self._accepted = frozenset(members) - {self.broker_id}
        self._accepted_epoch = epoch
        self._proposed = {e: m for e, m in self._proposed.items() if e >= epoch}
        return self._recompute_confirm()

    def proposing(self, members: tuple[int, ...], sync_state_set_epoch: int) -> None:
        """Controller mode: the shell is about to propose `members` under
        `sync_state_set_epoch` (call it before the request leaves): until a set of a newer epoch
        is accepted, the controller may commit it, so its slaves count (module docstring)."""
        assert self._accepted is not None, "static roles propose nothing"
        if sync_state_set_epoch < self._accepted_epoch:
            return  # overtaken already: the controller fences it
        slaves = frozenset(members) - {self.broker_id}
        self._proposed.setdefault(sync_state_set_epoch, set()).add(slaves)

    def proposal_pending(self) -> bool:
        """Does a proposal not yet overtaken name a slave outside the accepted set? Then the
        shell must propose (the local set, even when it equals the accepted one) until a newer
        set is accepted: else those slaves may hold back puts and the confirm position for
        good."""
        return bool(self._in_flight())

    def _in_flight(self) -> frozenset[int]:
        """Slaves of proposals not yet overtaken that the accepted set lacks."""
        if not self._proposed:
            return frozenset()
        slaves = frozenset().union(*(members for proposals in self._proposed.values()
                                     for members in proposals))
        return slaves - (self._accepted or frozenset())

    def stats(self) -> MasterStats:
        plan = self.plan_put(self._master_position)
        links = tuple(LinkStats(link.link_id, link.broker_id, link.state.value,
                                link.acked_log_position, link.next_log_position,
                                link.broker_id in self._members
                                and self._by_broker.get(link.broker_id) == link.link_id,
                                link.last_caught_up_ms)
                      for link in self._links.values())
        return MasterStats(self.master_epoch, self._confirm, self._master_position,
                           self.sync_state_set, plan.need, plan.in_sync, links,
                           self.accepted_sync_state_set, self._lease_until_ms)

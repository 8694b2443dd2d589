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
  position like a member, so the position stops running ahead of it and it can join under
  continuous load (else the confirm position, which follows the master's writes while it is
  alone, stays ahead of every ack); a candidate not caught up for haMaxTimeSlaveNotCatchup, or
  whose link closes, stops being one;
- leave: its link closes (at once), or it has not kept up (as above) for
  haMaxTimeSlaveNotCatchup.
The quorum rules (which acks count, the confirm position, controller mode's accepted set and
proposals in flight, the master lease) are ha/replication/master_quorum.py's, a mixin of
MasterReplication; settings, the log snapshot, effects and stats are in
ha/replication/master_effects.py (re-exported here: this module is the core's public surface).
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import logging

from conf.protocol import LOCAL, PeerVersion, refusal
from ha.replication.frames import Ack, Frame, MasterHello, Refuse, SlaveHello, Transfer
from ha.replication.master_effects import (
    CloseLink,
    ConfirmTo,
    LinkStats,
    MasterEffect,
    MasterLog,
    MasterSettings,
    MasterStats,
    SendFrame,
    SendLog,
    SendMetadata,
    SyncStateSetChanged,
    Wait,
)
from ha.replication.master_quorum import MasterQuorum, PutProgress
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

CONFIRM_PUSH_DELAY_MS = 5  # a confirm move waits this long after the last send for data to carry it
# A put's own thread ships a link's unsent bytes when they are at most this many (its put's
# bytes, maybe a few more): `next_send_idle`
SHIP_FROM_PUT_BYTES_MAX = 64 << 10


class LinkState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    WAIT_START = "WAIT_START"
    TRANSFER = "TRANSFER"
    CLOSED = "CLOSED"


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


class MasterReplication(MasterQuorum):
    """The master's replication decisions for one term. Not thread-safe (the shell locks).
    Links, shipping and SyncStateSet membership here; quorum accounting in MasterQuorum."""

    def __init__(self, settings: MasterSettings, *, broker_id: int, master_epoch: int,
                 endpoint: str, master_log_position: int, confirm_log_position: int,
                 now_ms: int, accepted_sync_state_set: tuple[int, ...] | None = None,
                 accepted_sync_state_set_epoch: int = 0,
                 lease_until_ms: int | None = None, version: PeerVersion = LOCAL) -> None:
        self.settings = settings
        self.version = version  # this process's protocol version (conf/protocol.py)
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
        # proposal carried (master_quorum.py's docstring, "Proposals in flight").
        # sync_state_set_epoch -> the slave sets of the proposals made at it, each exactly
        self._proposed: dict[int, set[frozenset[int]]] = {}
        # Controller mode: the master lease (master_quorum.py); None: no lease (static roles).
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
        refused = refusal(self.version, hello.version, f"HA link from slave {hello.broker_id}")
        if refused is not None:
            return [SendFrame(link.link_id, Refuse(refused)), *self._close(link.link_id, refused)]
        if hello.master_epoch_seen > self.master_epoch:
            reason = (f"slave {hello.broker_id} already followed master epoch "
                      f"{hello.master_epoch_seen} > this master's {self.master_epoch}")
            return [SendFrame(link.link_id, Refuse(reason)), *self._close(link.link_id, reason)]
        effects: list[MasterEffect] = []
        previous = self._by_broker.get(hello.broker_id)
        if previous is not None and previous != link.link_id and previous in self._links:
            effects += self._close(previous, f"slave {hello.broker_id} reconnected")
        self._by_broker[hello.broker_id] = link.link_id
        link.broker_id = hello.broker_id
        link.state = LinkState.WAIT_START
        effects.append(SendFrame(link.link_id, MasterHello(
            self.broker_id, self.master_epoch, log.min_log_position, log.log_position_end,
            self._confirm, self.settings.segment_size_bytes, self.endpoint, log.epochs,
            # in kind: a 0.1 slave's decoder wants the hello without the version block
            self.version.text() if hello.version else "")))
        return effects

    def _on_start(self, link: _Link, position: int, log: MasterLog, now_ms: int
                  ) -> list[MasterEffect]:
        if not log.min_log_position <= position <= log.log_position_end:
            reason = (f"slave {link.broker_id} would start at {position}, outside the master's "
                      f"log [{log.min_log_position}, {log.log_position_end}]")
            return [SendFrame(link.link_id, Refuse(reason)), *self._close(link.link_id, reason)]
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

    # -- acks and link ends -----------------------------------------------------------------
    def _ack_of(self, broker_id: int) -> int | None:
        """The acked position of a slave with a link in TRANSFER (None: no such link)."""
        link = self._links.get(self._by_broker.get(broker_id, -1))
        if link is None or link.state is not LinkState.TRANSFER:
            return None
        return link.acked_log_position

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

"""Master side of replication, the IO shell around ha/replication/master_core.py (threads,
blocking sockets).

    threads                         what they do
    ha-accept                       accept slave links on haListenPort (bounded by haConnectionsMax
                                    here, before any thread starts, and in the core), start a
                                    reader and a sender per link; a link that does not say
                                    SlaveHello within haHandshakeTimeoutMs is closed, and every
                                    started frame must be whole within haFrameTimeoutMs
    ha-read-<link>                  receive frames (SlaveHello, Ack, Refuse), feed the core, wake
                                    waiting puts
    ha-send-<link>                  ask the core what to send next (a CommitLog batch read from
                                    the store, a heartbeat, metadata) or how long to wait; woken
                                    by appends a put did not ship itself, and by ha-tick after
                                    confirm changes
    ha-tick                         housekeeping (silent links, SyncStateSet exits), metadata
                                    version polling; wakes the senders at most every
                                    CONFIRM_WAKE_INTERVAL_MS while the confirm position moves

One condition (`_cond`) guards the core; effects that touch only memory or the store's confirm
position run under it (so confirm updates are applied in the order the core made them); frames
go out after it is released. A put calls `replicate(end, need)` after its local write (and fsync
under SYNC_FLUSH) and waits on the condition for the quorum, up to syncFlushTimeout.

TLS (tls.server.mode=enforcing): an accepted connection goes through its TLS handshake on a
thread of its own (`ha-tls-<n>`, counted against haConnectionsMax, bounded by
haHandshakeTimeoutMs), and the slave's certificate must name a broker of this brokerName
(ha/replication/link.py member_handshake); anyone else is refused there, logged once per peer.

Start-up: the master opens a new term: its epoch is one above the last local epoch entry, which
it appends at the log's end (a restarted master thus fences slaves of its previous term, and
the Epoch-StartOffset rule reconciles them). In controller mode the epoch is the controller's
masterEpoch instead (appended unless the last entry already has it: only a take-over retried
by the same process finds it, since a restarted broker never continues a term it may have
served before its restart, ha/replication/role_core.py REELECT), and the SyncStateSet the controller
accepted is passed in; `on_sync_state_set` hears every change of the local set (to propose it), and
`accept_sync_state_set` applies the controller's answer. `renew_lease` extends the master lease
(ha/replication/master_quorum.py) each time the controller confirms this master; a put reads the
clock when it is judged, so one that waited through a pause is judged by the lease after it.

The path of one acknowledged put (README, "Where the time of one acknowledged put goes"): the
put's thread ships its own bytes to every slave not far behind (`_ship_idle`; the
senders handle the rest: catching up, heartbeats, metadata), and waits on `_put_cond`, a second
condition on `_cond`'s lock that every Ack notifies: the confirm position needs every member, a
put only `need` replicas, so under a majority quorum the first slave's ack completes the put
(waiting for a confirm move made every put wait for the slowest slave). Appends wake only the
senders, acks only the puts.
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable

from conf.tls import PeerRefusals, TLSSettings
from conf.tls_reload import ReloadingTLS, watch
from ha.replication import put_core
from ha.replication.config import BrokerRole, HAConfig
from ha.replication.errors import FrameError, LinkClosedError
from ha.replication.frames import Metadata
from ha.replication.link import FrameSocket, MemberRefused, member_handshake
from ha.replication.master_core import (
    CloseLink,
    ConfirmTo,
    MasterEffect,
    MasterLog,
    MasterReplication,
    MasterSettings,
    MasterStats,
    SendFrame,
    SendLog,
    SendMetadata,
    SyncStateSetChanged,
    Wait,
)
from ha.replication.quorum import PutPlan, QuorumSettings
from storage_engine import MessageStore, PutStatus

__all__ = ["MasterService", "quorum_settings"]

logger = logging.getLogger(__name__)

TICK_INTERVAL_MS = 50
# While the confirm position moves, the senders re-time their confirm push (the core's
# CONFIRM_PUSH_DELAY_MS) at most this often, not at every move: `_tick_loop`
CONFIRM_WAKE_INTERVAL_MS = 5
ACCEPT_POLL_S = 0.2


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def quorum_settings(config: HAConfig) -> QuorumSettings:
    return QuorumSettings(
        total_replicas=config.total_replicas, in_sync_replicas=config.in_sync_replicas,
        min_in_sync_replicas=config.min_in_sync_replicas,
        auto_in_sync_replicas=config.auto_in_sync_replicas,
        gap_not_in_sync_bytes_max=config.gap_not_in_sync_bytes_max,
        all_ack_in_sync_state_set=config.all_ack_in_sync_state_set)


class _LinkIO:
    def __init__(self, link_id: int, sock: FrameSocket) -> None:
        self.link_id = link_id
        self.sock = sock
        self.closed = threading.Event()
        self.threads: list[threading.Thread] = []
        # held from choosing a link's next bytes to having sent them (by its sender, or a
        # put shipping its own bytes), so transfers leave in log order; taken before the core
        # lock, never after it
        self.ship_lock = threading.Lock()


class MasterService:
    """Serve slave links for one master term over `store` (opened with auto_confirm=False)."""

    def __init__(self, store: MessageStore, config: HAConfig, *, broker_id: int, endpoint: str,
                 metadata_source: Callable[[], bytes] | None = None,
                 host: str = "127.0.0.1", master_epoch: int | None = None,
                 accepted_sync_state_set: tuple[int, ...] | None = None,
                 accepted_sync_state_set_epoch: int = 0,
                 on_sync_state_set: Callable[[tuple[int, ...]], None] | None = None,
                 sync_master: bool | None = None, lease_until_ms: int | None = None,
                 tls: TLSSettings | None = None, broker_name: str = "") -> None:
        self._store = store
        self._broker_name = broker_name
        # a new context per accepted link: rotated files serve the next handshake
        self.tls = (watch(ReloadingTLS(tls, what=f"HA master of {broker_name}", bulk=True))
                    if tls is not None and tls.enabled else None)
        self._handshaking = 0  # TLS handshakes in progress (they hold haConnectionsMax slots)
        self.refusals = PeerRefusals(logger, f"HA master of {broker_name}")
        self._config = config
        self._metadata_source = metadata_source
        self._on_sync_state_set = on_sync_state_set
        self._metadata_payload = b""
        self._metadata_version = 0
        self._metadata_polled_ms = -(1 << 62)
        last = store.epochs.last
        epoch = master_epoch if master_epoch is not None else (
            (last.epoch if last is not None else 0) + 1)
        assert last is None or last.epoch <= epoch, (last, epoch)
        if last is None or last.epoch < epoch:
            store.epochs.append(epoch, store.log_position_end)
        self.sync = _is_sync(config) if sync_master is None else sync_master
        settings = MasterSettings(
            quorum=quorum_settings(config),
            async_master=not self.sync,
            transfer_batch_bytes=config.transfer_batch_bytes,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            housekeeping_interval_ms=config.housekeeping_interval_ms,
            slave_not_catchup_max_ms=config.slave_not_catchup_max_ms,
            metadata_sync_interval_ms=config.metadata_sync_interval_ms,
            segment_size_bytes=store.segment_size_bytes, links_max=config.links_max)
        self._core = MasterReplication(
            settings, broker_id=broker_id, master_epoch=epoch, endpoint=endpoint,
            master_log_position=store.log_position_end,
            confirm_log_position=store.confirm_log_position, now_ms=_now_ms(),
            accepted_sync_state_set=accepted_sync_state_set,
            accepted_sync_state_set_epoch=accepted_sync_state_set_epoch,
            lease_until_ms=lease_until_ms)
        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # senders: new bytes to ship
        self._put_cond = threading.Condition(lock)  # waiting puts: acks, lease, membership
        self._tick_cond = threading.Condition(lock)  # the tick thread, idle between ticks
        self._confirm_moved = False  # since the senders last re-timed their confirm push
        self._tick_idle = False
        self._links: dict[int, _LinkIO] = {}
        self._link_ids = itertools.count(1)
        self.refused_links = 0  # over haConnectionsMax, closed at accept
        self.handshake_timeouts = 0
        self._stopping = threading.Event()
        self._server = socket.create_server((host, config.listen_port), backlog=config.links_max)
        self._server.settimeout(ACCEPT_POLL_S)
        self.listen_port = int(self._server.getsockname()[1])
        self._threads = [threading.Thread(target=self._accept_loop, name="ha-accept", daemon=True),
                         threading.Thread(target=self._tick_loop, name="ha-tick", daemon=True)]
        logger.info("HA master (epoch %d) listening on %s:%d", epoch, host, self.listen_port)

    def start(self) -> MasterService:
        for thread in self._threads:
            thread.start()
        return self

    @property
    def master_epoch(self) -> int:
        return self._core.master_epoch

    # -- puts -------------------------------------------------------------------------------
    def plan_put(self) -> PutPlan:
        with self._cond:
            return self._core.plan_put(self._store.log_position_end)

    def replicate(self, log_position: int, need: int, timeout_ms: int) -> PutStatus:
        """The master holds everything below `log_position`; wait until `need` replicas do."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        with self._cond:
            self._apply_locked(self._core.local_durable(log_position))
            links = list(self._links.values())
        if need > 1:
            self._ship_idle(links)
        else:  # an ASYNC_MASTER's put does not wait for its slaves: the senders ship
            with self._cond:
                self._cond.notify_all()
        with self._put_cond:
            # what each outcome means is ha/replication/put_core.py's (the simulator's too)
            while True:
                progress = self._core.put_progress(log_position, need, now_ms=_now_ms())
                remaining = deadline - time.monotonic()
                status = put_core.quorum_status(progress, expired=remaining <= 0,
                                                stopping=self._stopping.is_set())
                if status is not None:  # stopping: deposed or shut down
                    return status
                self._put_cond.wait(remaining)

    def _ship_idle(self, links: list[_LinkIO]) -> None:
        """Send the new bytes to each link not far behind from this (the put's)
        thread, and wake the senders of the others. Why: the hand-off to a sender thread
        (wake it, let it take the GIL) cost ~35 us of a ~1 ms acknowledged put, and woke every
        sender of the set at once to compete for the GIL (README, "Where the time of one
        acknowledged put goes"). A link whose sender holds its ship lock is left to it: the
        sender looks for new bytes again before it waits."""
        wake = False
        for link in links:
            if not link.ship_lock.acquire(blocking=False):
                wake = True
                continue
            try:
                with self._cond:
                    effect = self._core.next_send_idle(link.link_id, self._log(),
                                                       now_ms=_now_ms())
                if effect is None:
                    wake = True
                elif not link.closed.is_set():
                    try:
                        self._send_one(link, effect)
                    except OSError as err:  # as the sender would: its reader sees the end
                        logger.info("HA link %d: send failed: %s", link.link_id, err)
                        link.sock.shutdown()
            finally:
                link.ship_lock.release()
        if wake:
            with self._cond:
                self._cond.notify_all()

    def renew_lease(self, until_ms: int) -> None:
        """The controller named this broker master of its epoch in a reply to a heartbeat
        sent at `until_ms - lease` (monotonic ms): waiting puts are judged again."""
        with self._cond:
            self._core.renew_lease(until_ms)
            self._notify_all_locked()

    def stats(self) -> MasterStats:
        with self._cond:
            return self._core.stats()

    def sync_state_sets(self) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """(local set, accepted set): what to propose, and what the controller holds."""
        with self._cond:
            return self._core.sync_state_set, self._core.accepted_sync_state_set

    def accept_sync_state_set(self, members: tuple[int, ...],
                              sync_state_set_epoch: int | None = None) -> None:
        """Controller mode: the controller accepted `members` as this set's SyncStateSet (at
        `sync_state_set_epoch`; None: the next one)."""
        with self._cond:
            self._apply_locked(self._core.accept_sync_state_set(members, sync_state_set_epoch))
            self._notify_all_locked()

    def proposing(self, members: tuple[int, ...], sync_state_set_epoch: int) -> None:
        """Controller mode: a proposal is about to leave; its slaves count until a newer set
        is accepted (ha/replication/master_quorum.py, "Proposals in flight")."""
        with self._cond:
            self._core.proposing(members, sync_state_set_epoch)

    def proposal_pending(self) -> bool:
        """Must the local set be proposed (again) to fence a proposal still in flight?"""
        with self._cond:
            return self._core.proposal_pending()

    # -- effects ----------------------------------------------------------------------------
    def _log(self) -> MasterLog:
        store = self._store
        return MasterLog(store.min_log_position, store.log_position_end, store.epochs.entries,
                         self._metadata_version)

    def _apply_locked(self, effects: list[MasterEffect]) -> list[MasterEffect]:
        """Apply memory/store effects under the lock; return the frames to send after it."""
        later: list[MasterEffect] = []
        for effect in effects:
            if isinstance(effect, ConfirmTo):
                if effect.log_position > self._store.confirm_log_position:
                    self._store.set_confirm_log_position(effect.log_position)
            elif isinstance(effect, CloseLink):
                link = self._links.get(effect.link_id)
                if link is not None:
                    link.closed.set()
                    if any(isinstance(e, SendFrame) and e.link_id == effect.link_id
                           for e in later):
                        later.append(effect)  # a Refuse goes out first (_send_frames)
                    else:
                        link.sock.shutdown()
            elif isinstance(effect, SyncStateSetChanged):
                logger.info("SyncStateSet is now %s", list(effect.members))
                if self._on_sync_state_set is not None:
                    self._on_sync_state_set(effect.members)  # must not block: under the lock
            else:
                later.append(effect)
        if not effects:
            return later
        if all(isinstance(effect, ConfirmTo) for effect in effects):
            # A confirm move alone (every second ack under a majority quorum): the senders
            # need it only to re-time their confirm push, so the tick thread wakes them once
            # per CONFIRM_WAKE_INTERVAL_MS instead of at every put (they woke ~2.8 times per
            # put for nothing, taking the GIL just as the put's thread wrote its reply)
            self._put_cond.notify_all()
            self._confirm_moved = True
            if self._tick_idle:
                self._tick_cond.notify()
        else:
            self._notify_all_locked()
        return later

    def _notify_all_locked(self) -> None:
        self._cond.notify_all()
        self._put_cond.notify_all()
        self._tick_cond.notify_all()

    def _send_frames(self, effects: list[MasterEffect]) -> None:
        for effect in effects:
            assert isinstance(effect, (SendFrame, CloseLink)), effect
            link = self._links.get(effect.link_id)
            if isinstance(effect, CloseLink):  # after the frames before it (a refusal's line)
                if link is not None:
                    link.sock.shutdown()
                continue
            if link is not None:
                try:
                    link.sock.send_frame(effect.frame)
                except OSError as err:
                    logger.info("HA link %d: send failed: %s", effect.link_id, err)
                    link.sock.shutdown()

    # -- threads ----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, address = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                raise
            if len(self._links) + self._handshaking >= self._config.links_max:  # no threads
                self.refused_links += 1
                if self.refused_links & (self.refused_links - 1) == 0:  # 1, 2, 4, ...
                    logger.warning("refusing an HA link from %s:%d: %d links open "
                                   "(haConnectionsMax; %d refused so far)", address[0],
                                   address[1], len(self._links), self.refused_links)
                sock.close()
                continue
            if self.tls is not None:
                with self._cond:
                    self._handshaking += 1
                threading.Thread(target=self._open_tls_link, args=(sock, address),
                                 name="ha-tls", daemon=True).start()
                continue
            self._open_link(sock, address)

    def _open_tls_link(self, sock: socket.socket, address: tuple[str, int]) -> None:
        assert self.tls is not None
        try:
            tls = member_handshake(sock, self.tls.server(), broker_name=self._broker_name,
                                   timeout_s=self._config.handshake_timeout_ms / 1000)
        except MemberRefused as err:
            self.refusals.refuse(address[0], err.identity, str(err))
            return
        except (ssl.SSLError, OSError) as err:
            self.refusals.refuse(address[0], "", f"TLS handshake failed: {err}")
            return
        finally:
            with self._cond:
                self._handshaking -= 1
        if self._stopping.is_set():
            tls.close()
            return
        self._open_link(tls, address)

    def _open_link(self, sock: socket.socket, address: tuple[str, int]) -> None:
        link_id = next(self._link_ids)
        link = _LinkIO(link_id, FrameSocket(sock, body_bytes_max=self._config.frame_body_bytes_max,
                                            peer=f"{address[0]}:{address[1]}",
                                            io_timeout_s=self._config.frame_timeout_ms / 1000))
        with self._cond:
            self._links[link_id] = link
            later = self._apply_locked(self._core.link_opened(link_id, now_ms=_now_ms()))
        self._send_frames(later)
        for role, target in (("read", self._read_loop), ("send", self._send_loop)):
            thread = threading.Thread(target=target, args=(link,),
                                      name=f"ha-{role}-{link_id}", daemon=True)
            link.threads.append(thread)
            thread.start()

    def _read_loop(self, link: _LinkIO) -> None:
        idle_s = self._config.heartbeat_interval_ms / 1000.0
        # a stranger that never says SlaveHello does not keep a haConnectionsMax slot
        first_s: float | None = self._config.handshake_timeout_ms / 1000.0
        try:
            while not link.closed.is_set():
                frame = link.sock.recv_frame(idle_timeout_s=first_s or idle_s)
                if frame is None:
                    if first_s is not None:
                        self.handshake_timeouts += 1
                        logger.info("HA link %d (%s): no SlaveHello within %d ms "
                                    "(haHandshakeTimeoutMs): closed", link.link_id,
                                    link.sock.peer, self._config.handshake_timeout_ms)
                        return
                    continue
                first_s = None
                with self._cond:
                    later = self._apply_locked(self._core.on_frame(
                        link.link_id, frame, self._log(), now_ms=_now_ms()))
                    self._put_cond.notify_all()  # an ack may complete a put (docstring)
                self._send_frames(later)
        except (FrameError, LinkClosedError, OSError) as err:
            if not link.closed.is_set():
                logger.info("HA link %d (%s) ends: %s", link.link_id, link.sock.peer, err)
        finally:
            with self._cond:
                link.closed.set()
                self._links.pop(link.link_id, None)
                self._apply_locked(self._core.link_closed(link.link_id, now_ms=_now_ms()))
                self._notify_all_locked()
            link.sock.close()

    def _send_loop(self, link: _LinkIO) -> None:
        try:
            while not link.closed.is_set() and not self._stopping.is_set():
                shipping = link.ship_lock
                shipping.acquire()
                try:
                    with self._cond:
                        effect = self._core.next_send(link.link_id, self._log(),
                                                      now_ms=_now_ms())
                        if isinstance(effect, Wait):
                            # a put that finds the ship lock taken wakes us under the core lock:
                            # we hold that lock from next_send into wait(), so none is missed
                            shipping.release()
                            shipping = None
                            self._cond.wait(effect.wait_ms / 1000.0)
                            continue
                    self._send_one(link, effect)
                finally:
                    if shipping is not None:
                        shipping.release()
        except OSError as err:
            logger.info("HA link %d: sender stops: %s", link.link_id, err)
            link.sock.shutdown()

    def _send_one(self, link: _LinkIO, effect: MasterEffect) -> None:
        if isinstance(effect, SendLog):
            data = self._store.read_log(effect.transfer.log_position, effect.size_bytes)
            assert len(data) == effect.size_bytes, (len(data), effect)
            link.sock.send_transfer(effect.transfer, data)
        elif isinstance(effect, SendFrame):
            link.sock.send_frame(effect.frame)
        elif isinstance(effect, SendMetadata):
            link.sock.send_frame(Metadata(effect.version, self._metadata_payload))
        else:
            raise AssertionError(effect)  # noqa: TRY004 - a broken invariant, not input

    def _tick_loop(self) -> None:
        """Housekeeping every TICK_INTERVAL_MS; in between, while the confirm position moves,
        a wake-up of the senders every CONFIRM_WAKE_INTERVAL_MS (the first move after a quiet
        spell wakes this thread at once, so a lone put's confirm is pushed as before)."""
        next_tick_ms = _now_ms() + TICK_INTERVAL_MS
        while not self._stopping.is_set():  # this shell's loop: ends with close()
            now_ms = _now_ms()
            if now_ms >= next_tick_ms:
                next_tick_ms = now_ms + TICK_INTERVAL_MS
                self._poll_metadata(now_ms)
                with self._cond:
                    self._apply_locked(self._core.on_tick(self._log(), now_ms=now_ms))
            with self._cond:
                wait_ms = next_tick_ms - now_ms
                if self._confirm_moved:
                    self._confirm_moved = False
                    self._cond.notify_all()
                    wait_ms = min(wait_ms, CONFIRM_WAKE_INTERVAL_MS)
                else:
                    self._tick_idle = True
                if not self._stopping.is_set():
                    self._tick_cond.wait(max(wait_ms, 1) / 1000.0)
                self._tick_idle = False

    def _poll_metadata(self, now_ms: int) -> None:
        if self._metadata_source is None:
            return
        if now_ms - self._metadata_polled_ms < self._config.metadata_sync_interval_ms:
            return
        self._metadata_polled_ms = now_ms
        payload = self._metadata_source()
        if payload != self._metadata_payload:
            with self._cond:
                self._metadata_payload = payload
                self._metadata_version += 1
                self._cond.notify_all()

    def notify_appended(self) -> None:
        """Wake the senders (new bytes in the log)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        self._stopping.set()
        self._server.close()
        with self._cond:
            links = list(self._links.values())
            self._notify_all_locked()
        for link in links:
            link.closed.set()
            link.sock.shutdown()
        for thread in self._threads + [t for link in links for t in link.threads]:
            if thread.is_alive():
                thread.join(timeout=5)


def _is_sync(config: HAConfig) -> bool:
    return config.broker_role is BrokerRole.SYNC_MASTER

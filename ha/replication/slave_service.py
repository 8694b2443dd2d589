"""Slave side of replication, the IO shell around ha/replication/slave_core.py (one thread,
blocking socket).

    loop (thread ha-slave):
        connect to haMasterAddress ── fails ──> wait (bounded backoff) ──┐
            │                                                           │
        link_up(local log) -> SlaveHello                                │
        receive frames (idle timeout: haSendHeartbeatInterval)          │
            each frame and each timeout: core.on_frame / core.on_tick   │
            effects applied in order: Truncate / RestartLogAt / AppendEpoch
            / AppendLog (+fsync) / SendFrame(Ack) / DispatchLog / SetConfirm
            / ApplyMetadata / MasterKnown                               │
        CloseLink or a link error ──────────────────────────────────────┘

Backoff: haReconnectInterval, doubled after each failed attempt up to RECONNECT_BACKOFF_FACTOR_MAX
times it, reset once a link reaches TRANSFER. A handshake refusal (no common epoch, fork below
confirm) is kept in `stats().last_refusal` for `broker info`, and retried at the slow rate.

TLS (tls.server.mode=enforcing): the link is TLS with this broker's certificate, and the
master's must name a broker of the same brokerName (ha/replication/link.py member_handshake) and the
address dialled; a refusal is logged once per master address and retried like an unreachable
master.

Nothing a master sends is trusted (issue 16): frames are checked by ha/replication/frames.py,
positions and epochs by the core, records by the store's dispatcher (`ReplicatedDataError`: the bad
bytes are cut and the link is refused with an ERROR line), topic names before any path is built
(storage_engine.names), metadata by `Replication._apply_metadata`. Any other error ends the
link, logged with its traceback, and the loop reconnects: the thread never dies.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable

from conf.tls import PeerRefusals, TLSSettings
from conf.tls_reload import ReloadingTLS, watch
from ha.replication.config import HAConfig
from ha.replication.errors import FrameError, LinkClosedError
from ha.replication.link import FrameSocket, MemberRefused, member_handshake
from ha.replication.slave_core import (
    AppendEpoch,
    AppendLog,
    ApplyMetadata,
    CloseLink,
    DispatchLog,
    LocalLog,
    MasterKnown,
    RestartLogAt,
    SendFrame,
    SetConfirm,
    SlaveEffect,
    SlaveReplication,
    SlaveState,
    SlaveStats,
    Truncate,
)
from storage_engine import FlushDiskType, MessageStore, ReplicatedDataError, StorageError

__all__ = ["SlaveService"]

logger = logging.getLogger(__name__)

RECONNECT_BACKOFF_FACTOR_MAX = 8
CONNECT_TIMEOUT_S = 3.0


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class SlaveService:
    """Follow the master at haMasterAddress into `store` (opened with auto_confirm=False)."""

    def __init__(self, store: MessageStore, config: HAConfig, *, broker_id: int,
                 apply_metadata: Callable[[bytes], None] | None = None,
                 resolve_master: Callable[[], tuple[str, int] | None] | None = None,
                 master_epoch_min: int = 0, master_endpoint: str = "",
                 on_link_down: Callable[[], None] | None = None,
                 tls: TLSSettings | None = None, broker_name: str = "") -> None:
        """Static roles follow haMasterAddress; controller mode passes `resolve_master` (asked
        before every connection attempt: the master's HA address, None while unknown) and the
        epoch the controller named it in (`master_epoch_min`, older masters are refused);
        `on_link_down` hears every link that ends or cannot be opened (to tell the controller
        at once: `master_unreachable`)."""
        self._store = store
        self._config = config
        self._broker_name = broker_name
        # a new context per link to the master: rotated files serve the next handshake
        self.tls = (watch(ReloadingTLS(tls, what=f"HA slave of {broker_name}", bulk=True))
                    if tls is not None and tls.enabled else None)
        self.refusals = PeerRefusals(logger, f"HA slave of {broker_name}")
        self._apply_metadata = apply_metadata
        fsync = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._core = SlaveReplication(
            broker_id=broker_id, heartbeat_interval_ms=config.heartbeat_interval_ms,
            housekeeping_interval_ms=config.housekeeping_interval_ms, fsync_before_ack=fsync,
            master_epoch_min=master_epoch_min)
        if resolve_master is None:
            host, _, port = config.master_address.rpartition(":")
            static = (host, int(port))

            def static_master() -> tuple[str, int]:
                return static

            resolve_master = static_master
        self._resolve_master = resolve_master
        self._on_link_down = on_link_down
        self._master = ("", 0)
        # the master's client endpoint: from the controller, or once a handshake told us
        self.master_endpoint = master_endpoint
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()  # set by close() and by a finished master look-up
        self._sock: FrameSocket | None = None
        self.links_opened = 0
        self._thread = threading.Thread(target=self._run, name="ha-slave", daemon=True)

    def start(self) -> SlaveService:
        self._thread.start()
        return self

    def stats(self) -> SlaveStats:
        with self._lock:
            return self._core.stats()

    @property
    def master_unreachable(self) -> bool:
        """No link to the master in TRANSFER right now."""
        with self._lock:
            return self._core.state is not SlaveState.TRANSFER

    def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        with self._lock:
            sock = self._sock
        if sock is not None:
            sock.shutdown()
        self._thread.join(timeout=10)

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        base_s = self._config.reconnect_interval_ms / 1000.0
        factor = 1
        while not self._stopping.is_set():
            reached_transfer = False
            master = self._resolve_unless_stopped()
            if master is not None and not self._stopping.is_set():
                self._master = master
                raw = self._connect(master)
                if raw is not None:
                    reached_transfer = self._follow(raw)
            if self._on_link_down is not None and not self._stopping.is_set():
                self._on_link_down()
            factor = 1 if reached_transfer else min(factor * 2, RECONNECT_BACKOFF_FACTOR_MAX)
            self._stopping.wait(base_s * factor)

    def _connect(self, master: tuple[str, int]) -> socket.socket | None:
        """A connected (and, under TLS, verified) socket to `master`, else None."""
        try:
            raw = socket.create_connection(master, timeout=CONNECT_TIMEOUT_S)
        except OSError as err:
            logger.debug("cannot reach master %s:%d: %s", *master, err)
            return None
        if self.tls is None:
            return raw
        address = f"{master[0]}:{master[1]}"
        try:
            return member_handshake(raw, self.tls.client(), broker_name=self._broker_name,
                                    timeout_s=CONNECT_TIMEOUT_S, server_hostname=master[0])
        except MemberRefused as err:
            self.refusals.refuse(address, err.identity, str(err))
        except (ssl.SSLError, OSError) as err:
            self.refusals.refuse(address, "", f"TLS handshake failed: {err}")
        return None

    def _resolve_unless_stopped(self) -> tuple[str, int] | None:
        """`resolve_master()`, given up on (None) as soon as the service is closed.

        Why: in controller mode resolving asks the named master for its HA port (a Flight
        call with a timeout of a second); a master paused or cut off holds the call for all
        of it, and `close()` (a take-over: this slave was elected in its place) would wait
        for it before the new master could start (measured: 0.9 s of a 0.9 s take-over). The
        call runs on a daemon thread whose answer is dropped once the service is closing."""
        answer: list[tuple[str, int] | None] = []
        answered = threading.Event()

        def resolve() -> None:
            try:
                answer.append(self._resolve_master())
            except Exception:  # a failed look-up is a master not found (retried later)
                logger.exception("resolving the master failed")
            finally:
                answered.set()
                self._wake.set()

        threading.Thread(target=resolve, name="ha-resolve-master", daemon=True).start()
        while not answered.is_set() and not self._stopping.is_set():
            self._wake.wait()
            self._wake.clear()
        return answer[0] if answer and not self._stopping.is_set() else None

    def _follow(self, raw: socket.socket) -> bool:
        """Run one link until it ends; True when it got as far as receiving data."""
        peer = f"{self._master[0]}:{self._master[1]}"
        sock = FrameSocket(raw, body_bytes_max=self._config.frame_body_bytes_max, peer=peer,
                           io_timeout_s=self._config.frame_timeout_ms / 1000)
        store = self._store
        local = LocalLog(store.min_log_position, store.log_position_end,
                         store.confirm_log_position, store.epochs.entries,
                         store.segment_size_bytes)
        reached = False
        with self._lock:
            self._sock = sock
            self.links_opened += 1
            effects = self._core.link_up(local, now_ms=_now_ms())
        idle_s = min(self._config.heartbeat_interval_ms, 1000) / 1000.0
        try:
            while not self._stopping.is_set():
                if self._apply(sock, effects):
                    break
                reached = reached or self._core.state is SlaveState.TRANSFER
                frame = sock.recv_frame(idle_timeout_s=idle_s)
                with self._lock:
                    now_ms = _now_ms()
                    effects = [] if frame is None else self._core.on_frame(frame, now_ms=now_ms)
                    effects += self._core.on_tick(now_ms=now_ms)
        except ReplicatedDataError as err:  # the master's bytes are not records: refuse them
            logger.error("HA link to %s refused: %s", peer, err)
        except (FrameError, LinkClosedError, OSError, StorageError) as err:
            logger.info("HA link to %s ends: %s", peer, err)
        except Exception:  # shell boundary: the link ends, the thread lives on
            logger.exception("HA link to %s ends on an unexpected error", peer)
        finally:
            with self._lock:
                self._core.link_down()
                self._sock = None
            sock.close()
        return reached

    def _apply(self, sock: FrameSocket, effects: list[SlaveEffect]) -> bool:
        """Carry out the core's effects in order; True when the link must close."""
        store = self._store
        for effect in effects:
            if isinstance(effect, AppendLog):
                store.append_replicated(effect.log_position, effect.data)
                if effect.fsync:
                    store.flush()
            elif isinstance(effect, SendFrame):
                sock.send_frame(effect.frame)
            elif isinstance(effect, DispatchLog):
                store.dispatch_replicated()
            elif isinstance(effect, SetConfirm):
                if effect.log_position > store.confirm_log_position:
                    store.set_confirm_log_position(effect.log_position)
            elif isinstance(effect, AppendEpoch):
                store.epochs.append(effect.epoch, effect.start_log_position)
            elif isinstance(effect, Truncate):
                store.truncate_to(effect.log_position)
            elif isinstance(effect, RestartLogAt):
                store.reset_to(effect.log_position)
            elif isinstance(effect, ApplyMetadata):
                if self._apply_metadata is not None:
                    self._apply_metadata(effect.payload)
            elif isinstance(effect, MasterKnown):
                self.master_endpoint = effect.endpoint
                logger.info("following master %d (epoch %d, endpoint %s)", effect.broker_id,
                            effect.master_epoch, effect.endpoint)
            elif isinstance(effect, CloseLink):
                log = logger.warning if effect.refused else logger.info
                log("closing the HA link: %s", effect.reason)
                return True
            else:
                raise AssertionError(effect)  # noqa: TRY004 - an effect the core never makes
        return False

"""RaftShell: the asyncio shell around the Raft core and the replicated state machine.

Everything runs on one event loop (the core is not thread-safe; the Flight server hands
requests over with `run_coroutine_threadsafe`). The Ready loop, after every tick, message and
proposal (`_drain`), in this order, for the reason given in `controller.raft.core`:

    1. persist the Ready's snapshot, entries and hard state with fsync (FileRaftStorage);
    2. queue its messages to the peers;
    3. apply its snapshot / committed entries to `ControllerState`, answer the proposals
       waiting on those entries (only if the entry's term is the one proposed), and release
       ReadIndex reads whose index is applied;
    4. advance.

The shell owns the store directory (its LOCK file, the Raft storage), the transport to the
peers and the tick timer; what the leader does with requests and liveness lives above it
(controller/handlers.py, controller/watchdog.py), and reaches the replicated state only through
`propose` and `read_barrier`. A broken invariant or a storage failure (`die`) stops the whole
node rather than letting it limp on.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from controller.config import ControllerConfig
from controller.errors import BusyError, CodecError, NotLeaderError, StoreLockedError
from controller.raft import (
    Entry,
    EntryKind,
    FileRaftStorage,
    Message,
    ProposeStatus,
    RaftConfig,
    RaftNode,
    ReadState,
    Role,
    SnapshotRequest,
    save_ready,
)
from controller.state import (
    ApplyResult,
    Command,
    ControllerState,
    decode_command,
    encode_command,
)
from controller.telemetry import ControllerTelemetry
from controller.transport import RaftTransport

__all__ = ["Duty", "RaftShell", "monotonic_ms"]

logger = logging.getLogger(__name__)
TRANSFER_WAIT_TIMEOUTS = 3  # a transfer's wait for a new leader, in election timeouts

# A long-running task the shell runs beside its tick timer, cancelled when it stops
Duty = Callable[[], Coroutine[Any, Any, None]]


def monotonic_ms() -> int:
    """The shells' clock (the cores are given times read from it)."""
    return time.monotonic_ns() // 1_000_000


class RaftShell:
    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        store = Path(config.store_path)
        store.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(store / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self._lock_fd)
            raise StoreLockedError(f"{store} is in use by another controller") from err
        self.storage = FileRaftStorage(store / "raft")
        persisted = self.storage.load()
        raft_config = RaftConfig(
            node_id=config.node_id, voter_ids=config.voter_ids,
            election_timeout_ticks=config.election_timeout_ticks,
            heartbeat_interval_ticks=config.heartbeat_interval_ticks,
        )
        self.raft = RaftNode(raft_config, random.Random(int.from_bytes(os.urandom(8), "big")),
                             hard_state=persisted.hard_state, snapshot=persisted.snapshot,
                             entries=persisted.entries)
        self.state = (ControllerState.restore(persisted.snapshot.data)
                      if persisted.snapshot is not None else ControllerState())
        self._proposals: dict[int, tuple[int, asyncio.Future[ApplyResult]]] = {}
        self._reads: dict[int, asyncio.Future[None]] = {}
        self._read_waits: list[tuple[int, asyncio.Future[None]]] = []
        self._next_read_id = 0
        self.leader_since_ms: int | None = None  # when this node last became leader
        self._stopping: asyncio.Event | None = None
        self.transport: RaftTransport | None = None
        self._fatal: BaseException | None = None
        self.prefix = f"ctrl-{config.node_id}"
        self.telemetry = ControllerTelemetry()  # metrics and console (controller/telemetry.py)

    # -- life cycle ------------------------------------------------------------------------

    async def run(self, started: asyncio.Event | None = None, *,
                  duties: Sequence[tuple[str, Duty]] = ()) -> None:
        """Serve until `stop()`; the one long-running task group of the process. `duties`
        ((task name, coroutine function) pairs) run in it beside the tick timer."""
        self._stopping = asyncio.Event()
        peers = {peer: (host, port) for peer, host, port in self.config.peers}
        peers[self.config.node_id] = self.config.raft_bind_address()  # its own: where to listen
        self.transport = RaftTransport(
            self.config.node_id, peers, self._on_message,
            frame_bytes_max=self.config.frame_bytes_max,
            send_queue_max=self.config.send_queue_max,
            connections_max=self.config.connections_max,
            idle_timeout_ms=self.config.idle_timeout_ms,
            frame_timeout_ms=self.config.frame_timeout_ms,
            tls=self.config.tls,
        )
        try:
            async with asyncio.TaskGroup() as tasks:
                await self.transport.start(tasks)
                loops = [tasks.create_task(self._tick_loop(), name="raft-tick")]
                loops += [tasks.create_task(duty(), name=name) for name, duty in duties]
                if started is not None:
                    started.set()
                await self._stopping.wait()
                for loop in loops:
                    loop.cancel()
                await self.transport.close()
                raise asyncio.CancelledError  # ends the senders too
        except* asyncio.CancelledError:
            pass
        finally:
            self.storage.close()
            os.close(self._lock_fd)
        if self._fatal is not None:
            raise self._fatal  # a broken invariant stops the process (never limp on)

    def die(self, error: BaseException) -> None:
        logger.critical("%s stops: %r", self.prefix, error, exc_info=error)
        if self._fatal is None:
            self._fatal = error
        self.stop()

    def stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    async def _tick_loop(self) -> None:
        interval_s = self.config.tick_interval_ms / 1000
        next_s = time.monotonic()
        while True:  # the Raft clock, for the life of the node
            next_s += interval_s
            await asyncio.sleep(max(0.0, next_s - time.monotonic()))
            self.raft.tick()
            self._drain()

    def _on_message(self, message: Message) -> None:
        if self._fatal is not None:
            return  # stopping after a broken invariant: touch nothing more
        if isinstance(message, SnapshotRequest) and message.term >= self.raft.term:
            try:  # the core installs it whole: it must decode as a state first
                ControllerState.restore(message.snapshot.data)
            except CodecError as err:
                self.raft.rejected_messages += 1
                logger.warning("%s rejects a snapshot from %d: %s", self.prefix,
                               message.from_id, err)
                return
        try:
            self.raft.step(message)
            self._drain()
        except Exception as err:  # noqa: BLE001 - from a connection task: stop the whole node
            self.die(err)

    # -- the Ready loop --------------------------------------------------------------------

    def _drain(self) -> None:
        raft = self.raft
        assert self.transport is not None
        while raft.has_ready():
            ready = raft.ready()
            save_ready(self.storage, ready)  # fsync before anything is sent
            for message in ready.messages:
                self.transport.send(message)
            if ready.snapshot is not None:
                self.state = ControllerState.restore(ready.snapshot.data)
            for entry in ready.committed:
                self._apply(entry)
            for read in ready.read_states:
                self._on_read_state(read)
            raft.advance(ready)
            if ready.soft_state is not None:
                self._on_soft_state(ready.soft_state.role)
        self._release_reads()
        self._maybe_compact()

    def _apply(self, entry: Entry) -> None:
        result = ApplyResult("OK")
        if entry.kind is EntryKind.NORMAL:
            try:
                command = decode_command(entry.data)
                result = self.state.apply(command)
                self.telemetry.on_applied(command, result, entry.entry_index)
            except CodecError as err:  # every node skips it the same way
                logger.error("%s skips undecodable entry %d: %s", self.prefix,
                             entry.entry_index, err)
                result = ApplyResult("INVALID_REQUEST")
        waiting = self._proposals.pop(entry.entry_index, None)
        if waiting is not None and not waiting[1].done():
            term, future = waiting
            if term == entry.term:
                future.set_result(result)
            else:
                future.set_exception(NotLeaderError(self.leader_address()))

    def _on_read_state(self, read: ReadState) -> None:
        future = self._reads.pop(read.request_id, None)
        if future is not None:
            self._read_waits.append((read.entry_index, future))

    def _release_reads(self) -> None:
        applied = self.raft.log.applied_index
        still = []
        for entry_index, future in self._read_waits:
            if entry_index <= applied:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((entry_index, future))
        self._read_waits = still

    def _on_soft_state(self, role: Role) -> None:
        logger.info("%s is %s at term %d (leader %s)", self.prefix, role.value, self.raft.term,
                    self.raft.leader_id)
        self.telemetry.on_role(role.value, self.raft.term, self.raft.leader_id)
        if role is Role.LEADER:
            self.leader_since_ms = monotonic_ms()
            return
        self.leader_since_ms = None
        error = NotLeaderError(self.leader_address())
        futures = [f for _, f in self._proposals.values()] + list(self._reads.values())
        futures += [f for _, f in self._read_waits]
        self._proposals.clear()
        self._reads.clear()
        self._read_waits.clear()
        for future in futures:
            if not future.done():
                future.set_exception(error)

    def _maybe_compact(self) -> None:
        log, raft = self.raft.log, self.raft
        if log.applied_index - log.snapshot.entry_index < self.config.snapshot_every_entries:
            return
        if raft.has_ready() or log.applied_index > log.stable_index:
            return
        snapshot = raft.compact(log.applied_index, self.state.snapshot())
        self.storage.compact(snapshot)
        logger.info("%s compacted its log up to %d", self.prefix, snapshot.entry_index)

    # -- proposals and reads ---------------------------------------------------------------

    def leader_address(self) -> str | None:
        leader = self.raft.leader_id
        return self.config.client_address(leader) if leader is not None else None

    def require_leader(self) -> None:
        if self.raft.role is not Role.LEADER:
            raise NotLeaderError(self.leader_address())

    async def propose(self, command: Command) -> ApplyResult:
        result = self.raft.propose(encode_command(command))
        if result.status is ProposeStatus.NOT_LEADER:
            raise NotLeaderError(self.leader_address())
        if result.status is ProposeStatus.DROPPED:
            raise BusyError("leadership is being transferred" if self.raft.transfer_to
                            else "the Raft log has too many uncommitted entries")
        future: asyncio.Future[ApplyResult] = asyncio.get_running_loop().create_future()
        self._proposals[result.entry_index] = (result.term, future)
        self._drain()
        return await self._wait(future, f"entry {result.entry_index}")

    async def transfer_leadership(self, to_id: int | None = None) -> int | None:
        """Hand the leader role to follower `to_id` (None: the best one; RaftNode.
        transfer_leadership) and wait until it has one: the new leader's id, or None when
        this node leads again (the target did not win within an election timeout) or was not
        the leader or the target is not a peer (ValueError)."""
        if self.raft.transfer_leadership(to_id) is None:
            if self.raft.role is Role.LEADER and to_id is not None:
                raise ValueError(f"node {to_id} is not a follower of this group "
                                 f"({list(self.config.voter_ids)})")
            return None
        self._drain()
        interval_s = self.config.tick_interval_ms / 1000
        # the core gives up after an election timeout; then the new leader has to be heard of
        for _ in range(TRANSFER_WAIT_TIMEOUTS * self.config.election_timeout_ticks):
            raft = self.raft
            if raft.role is not Role.LEADER and raft.leader_id is not None:
                return raft.leader_id
            if raft.role is Role.LEADER and raft.transfer_to is None:
                return None  # gave up: this node serves again
            await asyncio.sleep(interval_s)
        return None

    async def read_barrier(self) -> None:
        """Return once this node's state is at least as new as any committed write (ReadIndex)."""
        self._next_read_id += 1
        request_id = self._next_read_id
        result = self.raft.read_index(request_id)
        if result.status is ProposeStatus.NOT_LEADER:
            raise NotLeaderError(self.leader_address())
        if result.status is ProposeStatus.DROPPED:
            raise BusyError("too many pending reads")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reads[request_id] = future
        self._drain()
        await self._wait(future, f"read {request_id}")

    async def _wait(self, future: asyncio.Future[Any], what: str) -> Any:
        try:
            async with asyncio.timeout(self.config.request_timeout_ms / 1000):
                return await asyncio.shield(future)
        except TimeoutError as err:
            future.cancel()  # nobody waits any more: later outcomes are dropped quietly
            raise BusyError(f"{what} not done within requestTimeoutMs") from err

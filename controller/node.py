"""ControllerNode: one controller process's node, composed of the pieces that each hold one idea.

    RaftShell          controller/raft_shell.py   the Raft core's asyncio shell: store lock,
                                                  persist-then-send Ready loop, transport to the
                                                  peers, tick timer, proposals and ReadIndex reads
    LiveTable          controller/liveness.py     brokers' heartbeats (soft state, every node)
    LivenessWatchdog   controller/watchdog.py     the leader's scan: dead masters replaced,
                                                  suspect masters probed
    RequestHandlers    controller/handlers.py     what the leader answers to each request

They share one event loop (the Raft core is not thread-safe; the Flight server hands requests
over with `run_coroutine_threadsafe`) and one task group (`RaftShell.run`), so a failure in
any of them stops the node. The imports point one way: handlers -> watchdog -> shell.
"""

from __future__ import annotations

import asyncio

from conf.acl import User
from controller.api import JsonMessage
from controller.config import ControllerConfig
from controller.handlers import RequestHandlers
from controller.liveness import LiveTable
from controller.raft import RaftNode
from controller.raft_shell import RaftShell
from controller.state import ControllerState
from controller.telemetry import ControllerTelemetry
from controller.watchdog import LivenessWatchdog

__all__ = ["ControllerNode"]


class ControllerNode:
    def __init__(self, config: ControllerConfig, *, init_user: User | None = None) -> None:
        self.config = config
        # initAuthenticationUser: the leader puts it in the replicated table when missing
        self.init_user = init_user
        self.shell = RaftShell(config)
        self.live = LiveTable(heartbeat_timeout_ms=config.heartbeat_timeout_ms,
                              brokers_max=config.live_brokers_max)
        self.watchdog = LivenessWatchdog(self.shell, self.live, init_user=init_user)
        self.handlers = RequestHandlers(self.shell, self.live, self.watchdog,
                                        init_user=init_user)
        self.prefix = self.shell.prefix
        self.telemetry: ControllerTelemetry = self.shell.telemetry  # metrics and console

    @property
    def raft(self) -> RaftNode:
        return self.shell.raft

    @property
    def state(self) -> ControllerState:
        """The applied replicated state (replaced whole when a snapshot is installed)."""
        return self.shell.state

    async def run(self, started: asyncio.Event | None = None) -> None:
        """Serve until `stop()`; the one long-running task group of the process."""
        await self.shell.run(started, duties=[("scan", self.watchdog.run)])

    def stop(self) -> None:
        self.shell.stop()

    def leader_address(self) -> str | None:
        return self.shell.leader_address()

    async def handle(self, action: str, request: JsonMessage | None) -> JsonMessage:
        """Answer one client request (already decoded); runs on the node's event loop."""
        return await self.handlers.handle(action, request)

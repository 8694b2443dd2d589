"""`rocketha-controller --conf conf/controller.conf`: run one controller until SIGTERM/SIGINT.

Start-up (conf/process.py, shared with the brokers): refuse `python -O` (asserts guard
invariants), read the properties file (an unknown key or a bad value exits 2 naming the key),
then lock and load the Raft store (a second controller on the same directory exits 2), start
Raft between the controllers, and serve the client endpoint. Shutdown: a leader first hands
its role to the best follower (TimeoutNow, controller/raft/transfer.py), so the group has a
leader again within a round trip instead of an election timeout; then stop the client
endpoint (in-flight calls finish), then the Raft node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import ssl
import sys

import pyarrow as pa

from conf.https import ContextSource
from conf.metrics_http import MetricsAccess, metrics_access, reloading_server_context
from conf.process import CONTROLLER_PROGRAM, refuse, start_server
from conf.tls_reload import request_reload
from controller.auth.verify import init_user
from controller.config import ControllerConfig
from controller.console.app import ConsoleServer
from controller.console.login import flight_login_check
from controller.errors import ConfigError, RaftStorageError, StoreLockedError
from controller.metrics import MetricsServer, serve_metrics
from controller.node import ControllerNode
from controller.raft import Role
from controller.service import ControllerService

__all__ = ["main"]

logger = logging.getLogger("rocketha.controller")


class ListenError(Exception):
    """A port of this controller cannot be bound (in use, or not an address of this host)."""


def _start_metrics(config: ControllerConfig, node: ControllerNode,
                   loop: asyncio.AbstractEventLoop, access: MetricsAccess) -> MetricsServer | None:
    if not config.metrics_port:
        return None
    host = config.client_address(config.node_id).rpartition(":")[0]
    try:
        return serve_metrics(node, loop, host, config.metrics_port, access)
    except OSError as err:
        raise ListenError(f"metricsPort {host}:{config.metrics_port}: {err}") from err


def _start_console(config: ControllerConfig, context: ContextSource | None
                   ) -> ConsoleServer | None:
    """The read-only console (controller/console/app.py), gathering over the client endpoints.
    With authentication on, viewers log in with their own keys (never a Super user's) and the
    console signs what it gathers for them with those keys."""
    if not config.console_port:
        return None
    host = config.client_address(config.node_id).rpartition(":")[0]
    login = flight_login_check(list(config.client_addresses), config.tls.client()) \
        if config.auth.authentication_enabled else None
    try:
        return ConsoleServer(list(config.client_addresses), host, config.console_port,
                             login=login, tls=config.tls.client(), ssl_context=context,
                             session_s=config.console_session_seconds)
    except OSError as err:
        raise ListenError(f"consolePort {host}:{config.console_port}: {err}") from err


def _console_context(config: ControllerConfig) -> ContextSource | None:
    """HTTPS for the console on a TLS member: consoleCertPath/consoleKeyPath, else the
    member's certificate (reloaded when the files change, as the member's links are); plain
    HTTP with consolePlaintext=true."""
    if not config.console_port or not config.tls.enabled or config.console_plaintext:
        return None
    if bool(config.console_cert_path) != bool(config.console_key_path):
        raise ValueError("consoleCertPath and consoleKeyPath go together")
    settings = dataclasses.replace(
        config.tls, server_cert_path=config.console_cert_path or config.tls.server_cert_path,
        server_key_path=config.console_key_path or config.tls.server_key_path)
    return reloading_server_context(settings, "console", ssl.CERT_NONE)  # browsers: no cert


async def _serve(config: ControllerConfig, node: ControllerNode, access: MetricsAccess,
                 console_context: ContextSource | None) -> None:
    loop = asyncio.get_running_loop()
    metrics = _start_metrics(config, node, loop, access)
    console = None
    try:
        console = _start_console(config, console_context)
        await _serve_node(config, node, loop)
    finally:
        for server in (console, metrics):
            if server is not None:
                server.close()


async def _serve_node(config: ControllerConfig, node: ControllerNode,
                      loop: asyncio.AbstractEventLoop) -> None:
    started = asyncio.Event()
    stop_requested = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop_requested.set)
    loop.add_signal_handler(signal.SIGHUP, request_reload)  # the TLS files, now (tls_reload)
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(node.run(started), name="controller-node")
        await started.wait()
        try:
            service = ControllerService(config, node, loop)
        except pa.ArrowException as err:
            node.stop()
            raise ListenError(f"controllerAddr {config.client_address(config.node_id)}: "
                              f"{err}") from err
        logger.info("%s serving clients on %s, Raft on %s:%d (peers %s), TLS %s", node.prefix,
                    config.client_address(config.node_id), *config.raft_address(config.node_id),
                    config.voter_ids, _tls_summary(config))
        if not config.tls.require_client_cert:
            checked = ("only by their user's ACLs (any user with Update on Cluster may speak "
                       "for any broker)" if config.auth.authentication_enabled else "not at all")
            logger.warning("%s: brokers' calls (register, heartbeat, SyncStateSet) are checked "
                           "%s: tls.server.mode=enforcing with tls.server.need.client.auth="
                           "require checks them against the brokers' certificates", node.prefix,
                           checked)
        stopper = tasks.create_task(stop_requested.wait(), name="wait-signal")
        await asyncio.wait([running, stopper], return_when=asyncio.FIRST_COMPLETED)
        logger.info("%s shutting down", node.prefix)
        if not running.done() and node.raft.role is Role.LEADER:
            # a leader hands its role over first: the group has a leader again within a round
            # trip, not after an election timeout (thesis §3.10)
            new_leader = await node.shell.transfer_leadership()
            logger.info("%s handed the Raft leadership to %s before stopping", node.prefix,
                        f"node {new_leader}" if new_leader is not None else "nobody (gave up)")
        await asyncio.to_thread(service.shutdown)
        node.stop()
        stopper.cancel()


def _tls_summary(config: ControllerConfig) -> str:
    tls = config.tls
    if not tls.enabled:
        return "off"
    return f"on (client certificates: {tls.need_client_auth}; Raft: mutual)"


PROGRAM = CONTROLLER_PROGRAM


def main(argv: list[str] | None = None) -> int:
    started = start_server(PROGRAM, argv, ControllerConfig.from_file, (ConfigError,))
    if isinstance(started, int):
        return started  # refused (or --example-conf printed): conf/process.py said why
    config = started.config
    try:
        bootstrap = init_user(config.auth)
        access = metrics_access(config.tls, config.metrics_bearer_token_file,
                                config.metrics_plaintext)
        console_context = _console_context(config)
    except (ValueError, OSError) as err:
        return refuse(PROGRAM.name, f"bad configuration in {started.conf_path}: {err}")
    try:
        node = ControllerNode(config, init_user=bootstrap)
    except (StoreLockedError, RaftStorageError) as err:
        return refuse(PROGRAM.name, str(err))
    refused: list[BaseException] = []
    try:
        asyncio.run(_serve(config, node, access, console_context))
    except* ListenError as group:  # one line, not a traceback
        refused.extend(group.exceptions)
    if refused:
        return refuse(PROGRAM.name, f"cannot listen on {refused[0]}")
    logger.info("ctrl-%d stopped cleanly", config.node_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`rocketha-controller --conf conf/controller.conf`: run one controller until SIGTERM/SIGINT.

Start-up (conf/process.py, shared with the brokers): refuse `python -O` (asserts guard
invariants), read the properties file (an unknown key or a bad value exits 2 naming the key),
then lock and load the Raft store (a second controller on the same directory exits 2), start
Raft between the controllers, and serve the client endpoint. Shutdown: stop the client
endpoint (in-flight calls finish), then the Raft node.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import pyarrow as pa

from conf.process import CONTROLLER_PROGRAM, refuse, start_server
from conf.signing import Credentials
from controller.auth.verify import init_user
from controller.config import ControllerConfig
from controller.console.app import ConsoleServer, basic_authorizer
from controller.errors import ConfigError, RaftStorageError, StoreLockedError
from controller.metrics import MetricsServer, serve_metrics
from controller.node import ControllerNode
from controller.service import ControllerService

__all__ = ["main"]

logger = logging.getLogger("rocketha.controller")


class ListenError(Exception):
    """A port of this controller cannot be bound (in use, or not an address of this host)."""


def _start_metrics(config: ControllerConfig, node: ControllerNode,
                   loop: asyncio.AbstractEventLoop) -> MetricsServer | None:
    if not config.metrics_port:
        return None
    host = config.client_address(config.node_id).rpartition(":")[0]
    try:
        return serve_metrics(node, loop, host, config.metrics_port)
    except OSError as err:
        raise ListenError(f"metricsPort {host}:{config.metrics_port}: {err}") from err


def _start_console(config: ControllerConfig, node: ControllerNode) -> ConsoleServer | None:
    """The read-only console (controller/console/app.py), gathering over the client endpoints.
    With authentication on, viewers log in as a Super user (HTTP Basic) and the console signs
    its calls as initAuthenticationUser (without one it cannot gather: the page shows why)."""
    if not config.console_port:
        return None
    host = config.client_address(config.node_id).rpartition(":")[0]
    authorize, credentials = None, None
    if config.auth.authentication_enabled:
        def super_secret_of(access_key: str) -> str | None:
            user = node.state.auth.user_by_access_key(access_key)
            if user is None and node.init_user is not None \
                    and node.init_user.access_key == access_key:
                user = node.init_user
            ok = user is not None and user.enabled and user.kind == "Super"
            return user.secret_key if ok and user is not None else None
        authorize = basic_authorizer(super_secret_of)
        if node.init_user is not None:
            credentials = Credentials(node.init_user.access_key, node.init_user.secret_key)
    try:
        return ConsoleServer(list(config.client_addresses), host, config.console_port,
                             authorize=authorize, tls=config.tls.client(),
                             credentials=credentials)
    except OSError as err:
        raise ListenError(f"consolePort {host}:{config.console_port}: {err}") from err


async def _serve(config: ControllerConfig, node: ControllerNode) -> None:
    loop = asyncio.get_running_loop()
    metrics = _start_metrics(config, node, loop)
    console = None
    try:
        console = _start_console(config, node)
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
    except (ValueError, OSError) as err:
        return refuse(PROGRAM.name, f"bad configuration in {started.conf_path}: {err}")
    try:
        node = ControllerNode(config, init_user=bootstrap)
    except (StoreLockedError, RaftStorageError) as err:
        return refuse(PROGRAM.name, str(err))
    refused: list[BaseException] = []
    try:
        asyncio.run(_serve(config, node))
    except* ListenError as group:  # one line, not a traceback
        refused.extend(group.exceptions)
    if refused:
        return refuse(PROGRAM.name, f"cannot listen on {refused[0]}")
    logger.info("ctrl-%d stopped cleanly", config.node_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`rocketha-controller --conf conf/controller.conf`: run one controller until SIGTERM/SIGINT.

Start-up: refuse `python -O` (asserts guard invariants), read the properties file (an unknown
key or a bad value exits 2 naming the key), lock and load the Raft store (a second controller
on the same directory exits 2), start Raft between the controllers, then serve the client
endpoint. Shutdown: stop the client endpoint (in-flight calls finish), then the Raft node.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import logging.handlers
import signal
import sys
from pathlib import Path

import pyarrow as pa

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


def main(argv: list[str] | None = None) -> int:
    faulthandler.enable()  # a crash in native code (gRPC, Arrow) leaves its stacks in the log
    if not __debug__:
        print("rocketha-controller: refusing to run with python -O (asserts guard invariants)",
              file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="rocketha-controller",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--conf", help="controller properties file (key=value)")
    parser.add_argument("--example-conf", action="store_true",
                        help="print the commented example controller.conf and exit")
    args = parser.parse_args(argv)
    if args.example_conf:
        return _print_example_conf()
    if args.conf is None:
        parser.error("--conf is required (--example-conf prints a commented example)")
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ControllerConfig.from_file(args.conf)
    except (ConfigError, OSError) as err:
        print(f"rocketha-controller: bad configuration in {args.conf}: {err}", file=sys.stderr)
        return 2
    refusal = config.plaintext_refusal()
    if refusal is not None:  # secure by default (README "Transport security")
        print(f"rocketha-controller: refusing to start: {refusal}", file=sys.stderr)
        return 2
    try:
        _configure_logging(config.log_file, config.log_file_bytes_max, config.log_files_kept)
    except OSError as err:
        print(f"rocketha-controller: logFile {config.log_file}: {err}", file=sys.stderr)
        return 2
    try:
        bootstrap = init_user(config.auth)
    except (ValueError, OSError) as err:
        print(f"rocketha-controller: bad configuration in {args.conf}: {err}", file=sys.stderr)
        return 2
    try:
        node = ControllerNode(config, init_user=bootstrap)
    except (StoreLockedError, RaftStorageError) as err:
        print(f"rocketha-controller: {err}", file=sys.stderr)
        return 2
    refused: list[BaseException] = []
    try:
        asyncio.run(_serve(config, node))
    except* ListenError as group:  # one line, not a traceback
        refused.extend(group.exceptions)
    if refused:
        print(f"rocketha-controller: cannot listen on {refused[0]}", file=sys.stderr)
        return 2
    logger.info("ctrl-%d stopped cleanly", config.node_id)
    return 0



def _print_example_conf() -> int:
    """The example controller.conf: from the checkout's conf/, else from the wheel's data files."""
    candidates = (Path(__file__).resolve().parents[1] / "conf" / "controller.conf",
                  Path(sys.prefix) / "share" / "rocketha" / "conf" / "controller.conf")
    for candidate in candidates:
        if candidate.is_file():
            sys.stdout.write(candidate.read_text())
            return 0
    print(f"rocketha-controller: no example controller.conf in {[str(c) for c in candidates]}", file=sys.stderr)
    return 2


def _configure_logging(log_file: str, bytes_max: int, kept: int) -> None:
    """Standard error, or `log_file` rotated by size (logFile, logFileBytesMax, logFilesKept)."""
    handler: logging.Handler = (logging.handlers.RotatingFileHandler(
        log_file, maxBytes=bytes_max, backupCount=kept, encoding="utf-8")
        if log_file else logging.StreamHandler())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


if __name__ == "__main__":
    sys.exit(main())

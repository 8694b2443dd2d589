"""`rocketha-proxy --conf proxy.conf`: serve RocketMQ 5's gRPC MessagingService on rocketha.

A separate process, a client of the cluster (controller routes + Arrow Flight to the masters):
pyarrow.flight and grpcio each bundle their own gRPC core, so the broker (Flight) and this
endpoint (grpcio) do not share a process. Start-up: refuse `python -O`, read the properties
file (connector/rmq_proxy/config.py; a bad key exits 2 naming it), then listen on
grpcListenPort. The POP state of a replica set is replayed (state_store.py) by the first call
that needs it (a receive, ack or ChangeInvisibleDuration naming that set), before it is used.
SIGTERM/SIGINT: stop accepting, let calls finish (5 s), write a snapshot of changed state.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import secrets
import signal
import sys
import threading
from concurrent import futures
from pathlib import Path
from types import FrameType

import grpc
from rocketmq.grpc_protocol import service_pb2_grpc

from conf.process import PROXY_PROGRAM, print_example_conf, refuse, server_parser
from conf.tls import TLSConfigError
from connector.protocol import RocketHAError
from connector.rmq_proxy.auth import Authenticator, parse_utc_offsets
from connector.rmq_proxy.certificates import ReloadingCredentials
from connector.rmq_proxy.cluster_io import ClusterLinks
from connector.rmq_proxy.config import ProxyConfig, ProxyConfigError
from connector.rmq_proxy.service import MessagingService
from connector.rmq_proxy.state_store import StateWriteError
from connector.rmq_proxy.users import ControllerUsers

__all__ = ["main", "serve"]

PROGRAM = PROXY_PROGRAM.name  # argparse's prog and the prefix of every refusal
logger = logging.getLogger("rocketha.proxy")

HANDLE_KEY_BYTES_MIN = 16
SNAPSHOT_POLL_S = 1.0
STOP_GRACE_S = 5.0


def _handle_key(path: str) -> bytes:
    if not path:
        logger.warning("grpcReceiptHandleKeyFile not set: a random key; receipt handles will "
                       "not survive a restart of this proxy")
        return secrets.token_bytes(32)
    key = Path(path).read_bytes().strip()
    if len(key) < HANDLE_KEY_BYTES_MIN:
        raise ProxyConfigError("grpcReceiptHandleKeyFile",
                               f"{path} holds {len(key)} bytes; at least {HANDLE_KEY_BYTES_MIN}")
    return key


def _authenticator(config: ProxyConfig, links: ClusterLinks) -> Authenticator:
    """grpcAuthenticationEnabled: the clients against the controllers' users. Refused: a
    proxy with keys (a secured cluster) and authentication off (every client would act with
    those keys), or authentication without keys (the users cannot be fetched)."""
    if not config.authentication_enabled:
        if links.credentials is not None:
            raise ProxyConfigError("grpcAuthenticationEnabled", "must be true: clientConfig "
                                   "holds keys (a secured cluster), and without it every "
                                   "RocketMQ client would act with them")
        return Authenticator(None)
    if links.credentials is None:
        raise ProxyConfigError("clientConfig", "grpcAuthenticationEnabled needs the keys of a "
                               "Super user (accessKey/secretKey) to read the users")
    users = ControllerUsers(links.auth_data, config.auth_refresh_interval_ms)
    users.refresh(wait=True)  # (a failure is logged; the first lookup tries again)
    return Authenticator(users, clock_skew_ms=config.auth_clock_skew_ms,
                         utc_offsets_minutes=parse_utc_offsets(config.auth_client_utc_offsets))


def serve(config: ProxyConfig, stop: threading.Event) -> int:
    """Run until `stop` is set."""
    links = ClusterLinks(config)
    authenticator = _authenticator(config, links)
    service = MessagingService(config, links, authenticator,
                               _handle_key(config.receipt_handle_key_file))
    message_bytes_max = config.message_body_bytes_max + (1 << 20)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=config.threads_max,
                                                    thread_name_prefix="rmq-proxy"),
                         options=[("grpc.max_receive_message_length", message_bytes_max),
                                  ("grpc.max_send_message_length", 64 << 20)],
                         maximum_concurrent_rpcs=config.threads_max)
    service_pb2_grpc.add_MessagingServiceServicer_to_server(service, server)
    address = f"{config.bind_address}:{config.listen_port}"
    if config.tls_cert_file:
        # the certificate follows its files at each new handshake (certificates.py)
        credentials = ReloadingCredentials(config.tls_cert_file, config.tls_key_file)
        bound = server.add_secure_port(address, credentials.credentials)
    else:
        bound = server.add_insecure_port(address)
    if bound == 0:
        logger.error("cannot listen on %s", address)
        return 2
    server.start()
    logger.info("rocketha-proxy pid %d serving apache.rocketmq.v2.MessagingService on %s "
                "(advertised %s, %s, authentication %s), controllers %s", os.getpid(), address,
                config.endpoint, "TLS" if config.tls_cert_file else "plaintext",
                "on" if authenticator.enabled else "off", config.controller_addr)
    try:
        while not stop.wait(SNAPSHOT_POLL_S):  # the process's one loop: until SIGTERM
            service.state.catch_up_all()  # other proxies' records on the same sets
            _snapshots(service, service.state.snapshot_due())
    finally:
        server.stop(STOP_GRACE_S).wait()
        _snapshots(service, service.state.snapshot_due())
        service.pops.close()
        links.close()
        logger.info("rocketha-proxy stopped: %s", service.stats())
    return 0


def _snapshots(service: MessagingService, broker_names: list[str]) -> None:
    for broker_name in broker_names:
        try:
            service.state.snapshot(broker_name)
        except (RocketHAError, StateWriteError) as err:
            logger.warning("snapshot of %s failed (replay starts at the previous one): %s",
                           broker_name, err)


def main(argv: list[str] | None = None) -> int:
    if not __debug__:
        return refuse(PROGRAM, "refusing to run with python -O (asserts guard invariants)")
    parser = server_parser(PROXY_PROGRAM)
    args = parser.parse_args(argv)
    if args.example_conf:
        return print_example_conf(PROXY_PROGRAM)
    if args.conf is None:
        parser.error("--conf is required (--example-conf prints a commented example)")
    try:
        config = ProxyConfig.from_file(args.conf)
    except (ProxyConfigError, OSError) as err:
        return refuse(PROGRAM, f"bad configuration in {args.conf}: {err}")
    if config.listen_port == 0:
        return refuse(PROGRAM, "grpcListenPort=0 (the endpoint is off)")
    handler: logging.Handler = (logging.handlers.RotatingFileHandler(
        config.log_file, maxBytes=100 << 20, backupCount=5, encoding="utf-8")
        if config.log_file else logging.StreamHandler())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return serve(config, stop)
    except (ProxyConfigError, TLSConfigError, OSError) as err:
        return refuse(PROGRAM, f"bad configuration in {args.conf}: {err}")


if __name__ == "__main__":
    sys.exit(main())

"""`rocketha-broker --conf conf/broker.conf`: run one broker until SIGTERM/SIGINT.

Start-up (conf/process.py, shared with the controller): refuse `python -O` (asserts guard
invariants), read the properties file (an unknown key or a bad value exits 2 naming the key),
then open the store (recovering after a crash; a second broker on the same directory exits 2)
and serve Arrow Flight on listenPort.
Shutdown on SIGTERM/SIGINT: stop accepting, refuse the next batch of open produce streams,
answer long polls, wait shutdownGraceMs for the calls left, then (no handler inside the store)
flush, write a clean checkpoint, remove the abort marker (BrokerService.shutdown).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

import pyarrow as pa

from conf.extras import extra_refusal
from conf.metrics_http import metrics_access
from conf.process import BROKER_PROGRAM, refuse, start_server
from conf.tls_reload import install_sighup
from ha.broker.config import BrokerConfig
from ha.broker.controller_link import (
    ControllerClient,
    ControllerLink,
    HeartbeatState,
    HeartbeatTopics,
)
from ha.broker.descriptors import make_room
from ha.broker.handover import hand_over_to_slave
from ha.broker.live_config import LiveConfig
from ha.broker.metrics import serve_metrics
from ha.broker.roles import RoleManager
from ha.broker.service import BrokerService
from ha.broker.thread_names import name_native_threads
from ha.broker.topic_tables import TopicTables
from ha.replication import BrokerRole
from storage_engine import (
    ConfigError,
    MessageStore,
    RetentionService,
    StoreFormatError,
    StoreLockedError,
)
from storage_engine.tiered import TierService

__all__ = ["main"]

logger = logging.getLogger("rocketha.broker")
SIGNAL_POLL_S = 0.5  # the main thread's wait for SIGTERM/SIGINT, between signal checks


PROGRAM = BROKER_PROGRAM


def main(argv: list[str] | None = None) -> int:
    name_native_threads()  # `top -H` and perf show "ha-read-1", not "python"
    started = start_server(PROGRAM, argv, BrokerConfig.from_file, (ConfigError,))
    if isinstance(started, int):
        return started  # refused (or --example-conf printed): conf/process.py said why
    config = started.config
    tier_url = config.store.tiered.url
    if config.store.tiered.enabled and tier_url.startswith(("s3://", "s3a://")):
        refusal = extra_refusal(PROGRAM.name, "s3", purpose=f"tieredStoreUrl {tier_url}")
        if refusal is not None:
            return refuse(PROGRAM.name, refusal)
    try:  # who may scrape /metrics: a bad token file is refused before the store opens
        access = metrics_access(config.tls, config.metrics_bearer_token_file,
                                config.metrics_plaintext)
    except (OSError, ValueError) as err:
        return refuse(PROGRAM.name, str(err))
    if not Path(config.store_path_root_dir).is_absolute():
        logger.info("storePathRootDir %s is relative: the store is %s (working directory %s)",
                    config.store_path_root_dir, config.store_dir.resolve(), Path.cwd())
    make_room(config.store_dir, config.queues_max)  # descriptors for every queue's files
    try:
        store = MessageStore(config.store_dir, config.store,
                             store_host=(config.broker_ip, config.listen_port),
                             auto_confirm=not config.ha.replicated)
    except (StoreLockedError, StoreFormatError) as err:  # one line; the store stays as it was
        return refuse(PROGRAM.name, str(err))
    tier = _start_tier(config, store)
    retention = None if tier is not None else RetentionService(store).start()  # tier: its own
    service: BrokerService | None = None
    try:
        service = BrokerService(config, store, tier_stats=tier.stats if tier else None)
        service.live_config = LiveConfig.from_file(started.conf_path)  # `broker config set`
        metrics = (serve_metrics(service, config.broker_ip, config.metrics_port, access)
                   if config.metrics_port else None)
    except BaseException as err:
        if service is not None:
            service.replication.close()
        if tier is not None:
            tier.stop()
        if retention is not None:
            retention.stop()
        store.close()
        if isinstance(err, OSError):  # a port in use: one line, not a traceback
            return refuse(PROGRAM.name, f"cannot listen (haListenPort {config.ha.listen_port}, "
                          f"metricsPort {config.metrics_port}): {err}")
        if isinstance(err, pa.ArrowException) and "did not start" in str(err):
            return refuse(PROGRAM.name, f"cannot listen on listenPort {config.endpoint} (in "
                          "use, or not an address of this host)")
        raise
    prefix = f"{config.broker_name}-{config.broker_id}"
    logger.info("%s serving on %s (bound to %s; store %s, %s, %s)", prefix, service.endpoint,
                config.client_bind_host, config.store_dir, config.store.flush_disk_type.value,
                config.ha.broker_role.value)
    if config.ha.acks_on_master_alone and config.enable_controller_mode:
        logger.warning("%s: inSyncReplicas=1 of totalReplicas=%d: a PUT_OK is on the master "
                       "alone until the slaves fetch it, so a failover may lose the last "
                       "acknowledged puts; set inSyncReplicas to a majority (with "
                       "enableAutoInSyncReplicas) or allAckInSyncStateSet=true", prefix,
                       config.ha.total_replicas)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            logger.info("%s received signal %d: shutting down", prefix, signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    install_sighup()  # SIGHUP: check the TLS files now (conf/tls_reload.py)
    service.request_stop = lambda: on_signal(signal.SIGTERM, None)  # `shutdown` action
    link, roles = _start_controller_link(config, service, tier)
    if link is not None:  # the `handover` action (`rocketha-admin broker elect`)
        service.request_handover = lambda named: hand_over_to_slave(service, link, named)
    # topic tables (docs/topic-tables.md): the thread runs on every broker, works on the master
    tables = TopicTables(service.config, store, service.topics,
                         master_epoch=service.replication.writing_master_epoch).start()
    service.table_stats = tables.stats
    service.config_listeners.append(tables.set_config)
    service.table_removal = tables.remove_table
    all_calls_ended = True
    try:
        all_calls_ended = _serve(service, tier, stopping, link)
    finally:
        tables.stop()  # before the store closes (it reads the store)
        if metrics is not None:
            metrics.close()
        if link is not None:
            link.stop()
        if roles is not None:
            roles.stop()
        if retention is not None:
            retention.stop()
        service.replication.close()
        store.close()
        logger.info("%s stopped cleanly%s", prefix, "" if all_calls_ended else (
            f" ({service.open_streams} idle produce stream(s) still open after "
            f"shutdownGraceMs={config.shutdown_grace_ms}: left to their clients' deadline)"))
    if not all_calls_ended:
        # Flight would wait for those streams at exit (to their deadline): leave now, the
        # store is closed and no handler is in it (BrokerService.shutdown)
        logging.shutdown()
        os._exit(0)
    return 0


def _start_tier(config: BrokerConfig, store: MessageStore) -> TierService | None:
    """Tiered storage (tieredStoreEnable): the master uploads, every broker reads cold data."""
    if not config.store.tiered.enabled:
        return None
    tier = TierService(store, config.store.tiered, broker_name=config.broker_name,
                       writer=f"{config.broker_name}-{config.broker_id}@{config.endpoint}",
                       upload=(config.ha.broker_role is not BrokerRole.SLAVE
                               and not config.runtime_roles),  # roles.py starts it
                       epoch=lambda: getattr(store.epochs.last, "epoch", 0))
    tier.start()
    return tier


def _start_controller_link(config: BrokerConfig, service: BrokerService,
                           tier: TierService | None
                           ) -> tuple[ControllerLink | None, RoleManager | None]:
    """Controller mode: register and heartbeat; the roles the controller names are applied by
    a RoleManager (ha/broker/roles.py): master, slave of another broker, or fenced."""
    if not config.enable_controller_mode:
        return None, None
    store = service.store
    topic_infos = HeartbeatTopics()

    def report() -> HeartbeatState:
        state = HeartbeatState()
        # first the lease, then the positions: a lapsed lease's report covers every put the
        # master acked under it (an operator's election waits for such a report)
        state.master_lease_lapsed = roles.master_lease_lapsed()
        stats = store.stats()
        state.master_epoch = getattr(store.epochs.last, "epoch", 0)
        state.max_log_position = stats.log_position_end
        state.confirm_log_position = stats.confirm_log_position
        state.topics = topic_infos(service.topics.all())
        state.master_unreachable_epoch = service.replication.master_unreachable_epoch()
        state.master_epoch_abandoned = roles.abandoned_epoch()
        state.leaving = service.replication.handover.leaving
        return state

    client = ControllerClient(config.controller_addr, config.controller_request_timeout_ms,
                              config.controller_redirects_max, config.tls.client(),
                              service.inner_credentials)
    roles = RoleManager(service, client, tier).start()
    link = ControllerLink(client, cluster_name=config.broker_cluster_name,
                          broker_name=config.broker_name, broker_address=service.endpoint,
                          heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
                          report=report, on_role=roles.submit, on_confirm=roles.confirm,
                          on_auth=service.set_auth_data if config.auth.authentication_enabled
                          else None)
    roles.on_master_lost = link.wake
    service.controller_info = lambda: {**link.info(), **roles.info()}
    link.start()
    return link, roles


def _serve(service: BrokerService, tier: TierService | None, stopping: threading.Event,
           link: ControllerLink | None) -> bool:
    """Serve until SIGTERM/SIGINT; then stop tiering (aborting uploads) before the store closes.
    Returns whether every call ended within shutdownGraceMs (BrokerService.shutdown).

    The main thread waits in Python, not in `FlightServerBase.serve()`: serve() hands SIGTERM
    and SIGINT to Arrow's C++ server, which shuts down (waiting for every call to end) before
    Python's handler runs. A producer's open DoPut stream then kept a SIGTERMed broker taking
    its puts until the stream's deadline, 2 x requestTimeoutMs (20 s by default; found timing
    the suite's broker restarts)."""
    try:
        while not stopping.wait(SIGNAL_POLL_S):
            pass  # (the signal handlers run on this thread, between waits)
        if link is not None:  # a master hands its role over first (ha/broker/handover.py)
            logger.info("%s", hand_over_to_slave(service, link)[1])
        return service.shutdown(service.config.shutdown_grace_ms / 1000.0)
    finally:
        if tier is not None:
            tier.stop()


if __name__ == "__main__":
    sys.exit(main())

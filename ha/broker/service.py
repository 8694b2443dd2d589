"""The broker's client endpoint: an Arrow Flight server over one MessageStore (its wiring).

See connector/protocol/wire.py for what each call carries. Handlers run on the Flight server's
threads and call the (thread-safe) store directly, each step inside the store's admission gate
(ha/broker/admission.py). BrokerService holds the state its calls share and builds the
collaborators (auth, topic and offset logs, replication, idempotence table); the calls
themselves live in one module per path, as methods of its bases:

    DoPut                        ha/broker/produce.py        ProducePath
    DoGet, GetFlightInfo,        ha/broker/consume.py        ConsumePath
      ListFlights
    DoAction, ListActions        ha/broker/admin_actions.py  AdminActions
    errors of every call         ha/broker/request_errors.py (RequestError -> typed Flight error)

A request that breaks the protocol gets a typed Flight error (`rocketha error <code> <NAME>:
...`) and only that call fails; put statuses (MESSAGE_ILLEGAL, FLUSH_DISK_TIMEOUT...) are
replies, not errors, so a produce stream continues.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from pyarrow import flight

from conf import read_credentials_file
from conf.tls import flight_location, flight_server_options
from controller.api import AuthData
from ha.broker.addresses import join_host_port
from ha.broker.admin_actions import AdminActions
from ha.broker.admission import Admission
from ha.broker.auth import AuditLog, AuthGate, load_acl_file
from ha.broker.batch_places import locate_in_log
from ha.broker.config import BrokerConfig
from ha.broker.consume import ConsumePath
from ha.broker.idempotence import IdempotenceConfig, IdempotentPuts, rebuild_table
from ha.broker.live_config import LiveConfig
from ha.broker.long_poll import Arrivals
from ha.broker.offset_log import OffsetLog
from ha.broker.produce import ProducePath
from ha.broker.replication import Replication
from ha.broker.telemetry import Traffic
from ha.broker.topic_log import TopicLog
from storage_engine import MessageBatch, MessageStore, PutResult, atomic_write_bytes

__all__ = ["BrokerService"]

AUTH_CACHE_FILE = "auth.json"


@dataclasses.dataclass
class _Counters:
    values: dict[str, int] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class BrokerService(ProducePath, ConsumePath, AdminActions, flight.FlightServerBase):
    """The Flight server: its state and wiring here, its calls in the modules of its bases."""

    def __init__(self, config: BrokerConfig, store: MessageStore, *,
                 tier_stats: Callable[[], dict[str, Any]] | None = None) -> None:
        # authentication and authorization (ha/broker/auth.py): static mode reads aclFile,
        # controller mode gets the table from the controller (controller_link)
        settings = config.auth
        # controller mode: the last table the controller served, kept for a restart while no
        # controller answers (docs/design.md §5.6: the controller down never stops the data plane)
        self._auth_cache = config.store_dir / "config" / AUTH_CACHE_FILE
        cached = (load_acl_file(str(self._auth_cache)) if not settings.acl_file
                  and config.enable_controller_mode and self._auth_cache.exists() else None)
        # innerClientCredentialsFile: how this broker signs its calls to the controller and to
        # other brokers (a member's TLS certificate may stand in for it)
        self.inner_credentials = (read_credentials_file(settings.inner_credentials_file,
                                                        "innerClientCredentialsFile")
                                  if settings.inner_credentials_file else None)
        self.auth = AuthGate(settings, load_acl_file(settings.acl_file) if settings.acl_file
                             else cached, audit=AuditLog(settings.audit_log_file,
                                                       settings.audit_log_bytes_max,
                                                       settings.audit_logs_kept, "broker"))
        # controller mode: until the first table arrives (even over a cached one, which may
        # lack users added meanwhile) an unknown user is told "not ready, retry" (BUSY)
        self.auth.table_current = not (config.enable_controller_mode and not settings.acl_file
                                       and settings.authentication_enabled)
        # bind to bindAddress; hand out brokerIP1 (self.endpoint, the FlightInfo locations)
        # TLS per tls.* (conf/tls.py); the auth middleware, not an auth
        # handler, so peer_identity() stays the client certificate's identity
        super().__init__(flight_location(join_host_port(config.client_bind_host,
                                                        config.listen_port), config.tls.enabled),
                         middleware=self.auth.middleware(), **flight_server_options(config.tls))
        self.config = config
        self.live_config = LiveConfig(None, {})  # main: the conf file's (live_config.py)
        self.config_listeners = []
        self.store = store
        self._tier_stats = tier_stats or (lambda: {"enabled": False})
        self.controller_info: Callable[[], dict[str, Any]] | None = None  # controller mode
        self.request_stop: Callable[[], None] | None = None  # the `shutdown` action (main)
        # topic tables' progress (ha/broker/topic_tables.py, started by main)
        self.table_stats: Callable[[], dict[str, Any]] = lambda: {"role": "off", "topics": {}}
        # topic configs and consumer-group offsets: records in the CommitLog, written through
        # replication.put (ha/broker/system_log.py)
        self.topics = TopicLog(config.store_dir / "config", store, put=self._put_system_record,
                               write_timeout_ms=store.config.sync_flush_timeout_ms)
        self.offsets = OffsetLog(config.store_dir / "config", store,
                                 flush_interval_ms=config.flush_consumer_offset_interval_ms,
                                 put=self._put_system_record,
                                 write_timeout_ms=store.config.sync_flush_timeout_ms)
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._arrivals = Arrivals()  # confirm moves wake long polls (ha/broker/long_poll.py)
        self._long_poll_slots = threading.BoundedSemaphore(config.long_polling_max)
        self._counters = _Counters()
        # stopping (`shutdown`): produce streams refuse their next batch, long polls end
        self._closing = threading.Event()
        self.admission = Admission()  # handlers inside the store (closed before it closes)
        self._open_streams = 0  # produce streams (under _counters.lock)
        self.traffic = Traffic()  # per-batch counts for /metrics (ha/broker/telemetry.py)
        self._started_ms = int(time.time() * 1000)
        store.add_confirm_listener(self._on_confirm)
        self.replication = Replication(config, store, endpoint=self.endpoint,
                                       topics=self.topics, offsets=self.offsets)
        self.topics.start()
        self.offsets.start()
        self.idempotence = IdempotentPuts(rebuild_table(store, IdempotenceConfig(
            producers_max=config.idempotence_producers_max,
            window_messages=config.idempotence_rebuild_messages,
            window_ms=config.idempotence_rebuild_window_ms,
            batches_max=config.idempotence_batches_kept), now_ms=int(time.time() * 1000)),
            functools.partial(locate_in_log, store))  # a duplicate's positions (issue 43)
        self._actions = self._action_handlers()  # (ha/broker/admin_actions.py)
        self._ready = True

    @property
    def endpoint(self) -> str:
        return f"{self.config.broker_ip}:{self.port}"

    def shutdown(self, grace_s: float | None = None) -> bool:
        """Stop serving; returns whether every call ended within `grace_s` (None: wait for
        all, as Flight's own shutdown does).

        Every open produce stream refuses its next batch (the client retries elsewhere or
        after the restart) and long polls answer at once, so busy calls end within a round
        trip. What is left after the grace are idle produce streams (`open_streams`), blocked
        reading a batch their client may never send before its deadline; they hold nothing of
        the store. The store's admission gate is closed either way: once this returns, no
        handler is inside the store and none enters it, so the store can close."""
        self._closing.set()
        self._arrivals.notify()  # long polls re-check, see the closing flag and answer
        stopper = threading.Thread(target=super().shutdown, name="flight-shutdown",
                                   daemon=True)
        stopper.start()
        stopper.join(grace_s)
        self.admission.close()  # handlers inside finish their step (each is bounded)
        return not stopper.is_alive()

    @property
    def open_streams(self) -> int:
        """Produce streams open now (idle ones, once a stop has refused the busy ones)."""
        with self._counters.lock:
            return self._open_streams

    def set_auth_data(self, auth: AuthData) -> None:
        """The users/ACL table the controller serves (controller mode), replaced whole, and
        kept under the store (mode 0600: it holds secrets) for a restart."""
        self.auth.auth_data = auth
        self.auth.table_current = True
        self._auth_cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self._auth_cache, json.dumps(auth.to_json()).encode(), 0o600)

    def _count(self, name: str, amount: int = 1) -> None:
        with self._counters.lock:
            self._counters.values[name] = self._counters.values.get(name, 0) + amount

    def _count_error(self, name: str) -> None:
        """A request refused with wire error `name` (rejected requests by code, /metrics)."""
        with self._counters.lock:
            values = self._counters.values
            values["request_errors"] = values.get("request_errors", 0) + 1
            key = f"error:{name}"
            values[key] = values.get(key, 0) + 1

    def counters_snapshot(self) -> dict[str, int]:
        """Request counters (`error:<CODE>` per refused call, long polls) for /metrics."""
        with self._counters.lock:
            return dict(self._counters.values)

    def tier_stats(self) -> dict[str, Any]:
        return self._tier_stats()

    def _put_system_record(self, batch: MessageBatch) -> PutResult:
        return self.replication.put(batch)

    def _on_confirm(self, log_position: int) -> None:
        self._arrivals.notify()

"""BrokerConfig: a broker's `key=value` properties file, with RocketMQ's parameter names.

Only entry points read files; everything else receives the frozen config. An unknown key or a
bad value stops start-up with a ConfigError naming the key (a typo must never be silently
ignored). Store keys (`mappedFileSizeCommitLog`, `flushDiskType`, `maxMessageSize`, ...) are
passed to `storage_engine.StoreConfig.from_properties`, replication keys (`brokerRole`,
`haListenPort`, `haMasterAddress`, `totalReplicas`, ...) to `ha.replication.config.HAConfig`.

Addresses (ha/broker/addresses.py): `brokerIP1` is the host this broker hands out for its
client endpoint (registered with the controller, in routes and NOT_MASTER redirects), `brokerIP2`
the host slaves dial for its haListenPort (default brokerIP1). Each listener binds to its own
address, `bindAddress` (client endpoint, default brokerIP1) and `haBindAddress` (HA, default
brokerIP2); `0.0.0.0` binds every interface. An advertised host must be one another machine can
dial: a wildcard there is a ConfigError naming the key.

Static roles: brokerId 0 is the master (brokerRole SYNC_MASTER or ASYNC_MASTER), any other id a
SLAVE; a mismatch is a ConfigError naming brokerId. Controller mode (`enableControllerMode=true`
with `controllerAddr=host:port[,...]`): the controller assigns the broker id and the role
(ha/broker/controller_link.py), so the brokerId/brokerRole check is skipped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import conf
from conf import BadValueError, parse_bool, parse_host_port, unknown_key_message
from conf.controller_addresses import controller_addresses
from conf.tls import TLS_KEYS, TLSConfigError, TLSSettings, plaintext_refusal
from conf.tls_reload import check_files
from ha.broker.addresses import check_advertised_host, check_bind_host
from ha.broker.auth import AUTH_KEYS, AuthSettings, parse_auth_settings
from ha.broker.metadata import TABLE_FORMATS
from ha.replication.config import HA_PROPERTY_KEYS, HAConfig
from storage_engine import STORE_PROPERTY_KEYS, ConfigError, StoreConfig

__all__ = ["BROKER_KEYS", "LIVE_KEYS", "MASKED", "SECRET_KEYS", "BrokerConfig",
           "effective_properties", "live_update", "parse_properties", "top_level_properties"]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    broker_cluster_name: str = "DefaultCluster"  # brokerClusterName
    broker_name: str = "broker-a"  # brokerName (the replica set)
    broker_id: int = 0  # brokerId (0 = master in static mode)
    broker_ip: str = "127.0.0.1"  # brokerIP1 (advertised client host)
    broker_ip2: str = ""  # brokerIP2 (advertised HA host; "" = brokerIP1)
    bind_address: str = ""  # bindAddress (client listener; "" = brokerIP1)
    ha_bind_address: str = ""  # haBindAddress (HA listener; "" = brokerIP2)
    listen_port: int = 10911  # listenPort (Arrow Flight, clients)
    store_path_root_dir: str = "store"  # storePathRootDir
    auto_create_topic_enable: bool = True  # autoCreateTopicEnable
    default_topic_queue_nums: int = 8  # defaultTopicQueueNums
    long_polling_max: int = 256  # concurrent long-poll reads (each holds a server thread)
    long_polling_wait_max_ms: int = 30_000  # cap on a ticket's max_wait_ms
    # shutdownGraceMs: on SIGTERM, how long the calls still open may take to end before the
    # store closes anyway (idle produce streams end only at their client's deadline)
    shutdown_grace_ms: int = 2000
    # handoverTimeoutMs: controller mode, on SIGTERM a master first hands its role to an
    # in-sync slave (ha/broker/handover.py); the longest that may take (and a put be held)
    # before it stops as a crash would; 0: no handover
    handover_timeout_ms: int = 5000
    put_rows_max: int = 65_536  # rows in one produce batch
    put_batch_bytes_max: int = 64 << 20  # bytes of one produce batch
    # putStreamsMax: produce streams open at once (each holds a server thread while open; a
    # producer keeps one per round trip it runs here at once, for all its topics): one more is
    # refused BUSY
    put_streams_max: int = 4096
    # queuesMax: queues this broker may hold (each topic counts its larger queue count); a
    # topic create, update or auto-create past it is refused BAD_REQUEST with one line. 0:
    # derived from the hard RLIMIT_NOFILE, (hard - 1024) // 2 (ha/broker/descriptors.py)
    queues_max: int = 0
    idempotence_producers_max: int = 100_000  # producers whose last sequence is remembered
    idempotence_rebuild_messages: int = 65_536  # tail of each queue scanned for markers at start
    idempotence_rebuild_window_ms: int = 86_400_000  # markers older than this are not rebuilt
    idempotence_batches_kept: int = 5  # places of each producer's last batches (duplicate answers)
    # flushConsumerOffsetInterval: consumerOffset.json, a snapshot of the offsets (the records
    # in the CommitLog are the truth: ha/broker/offset_log.py), is rewritten this often
    flush_consumer_offset_interval_ms: int = 5000
    # topic tables (docs/topic-tables.md): a topic with table=delta (or every topic, with
    # topicTableDefault=delta) is copied by the master into a Delta table under the tier URL
    topic_table_default: str = "none"  # topicTableDefault: none | delta
    topic_table_interval_ms: int = 5000  # topicTableIntervalMs: one commit per topic this often
    topic_table_commit_rows_max: int = 1_000_000  # topicTableCommitRowsMax (rows in one commit)
    topic_table_commit_bytes_max: int = 64 << 20  # topicTableCommitBytesMax (record bytes)
    # topicTableNice: the table threads' nice above the broker's (0: none), read at start: under
    # CPU saturation puts win and the tables lag (docs/topic-tables.md, "CPU")
    topic_table_nice: int = 10
    # table upkeep (ha/broker/table_maintenance.py): compaction, vacuum, the table's retention
    topic_table_maintenance_interval_ms: int = 3_600_000  # topicTableMaintenanceIntervalMs
    topic_table_target_file_bytes: int = 128 << 20  # topicTableTargetFileBytes
    topic_table_vacuum_hours: int = 168  # topicTableVacuumHours (old versions' files kept)
    topic_table_retention_hours: int = 0  # topicTableRetentionHours (0: rows kept forever)
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)
    enable_controller_mode: bool = False  # enableControllerMode
    controller_addr: tuple[str, ...] = ()  # controllerAddr (host:port[,host:port...])
    broker_heartbeat_interval_ms: int = 1000  # brokerHeartbeatInterval (to every controller)
    controller_request_timeout_ms: int = 3000  # controllerRequestTimeoutMs (one call)
    controller_redirects_max: int = 3  # controllerRedirectsMax (NOT_LEADER hops per call)
    # masterLeaseMs: how long a controller's confirmation lets a master ack by its quorum rule;
    # used up to 2/3 of the controller's controllerHeartbeatTimeoutMs
    # (ha/replication/master_core.py)
    master_lease_ms: int = 2000
    metrics_port: int = 0  # metricsPort: Prometheus /metrics on brokerIP1 (0 = off)
    # who may scrape it (conf/metrics_http.py): a token file, and plain HTTP on a TLS broker
    metrics_bearer_token_file: str = ""  # metricsBearerTokenFile
    metrics_plaintext: bool = False  # metricsPlaintext
    log_file: str = ""  # logFile: log here, rotated by size ("" = standard error)
    log_file_bytes_max: int = 100 << 20  # logFileBytesMax: rotate past this size
    log_files_kept: int = 5  # logFilesKept: rotated files kept (logFile.1 ... .N)
    ha: HAConfig = dataclasses.field(default_factory=HAConfig)
    tls: TLSSettings = dataclasses.field(default_factory=TLSSettings)  # tls.* (README)
    # allowInsecure: listen beyond loopback without TLS and authentication (else
    # rocketha-broker refuses to start)
    allow_insecure: bool = False
    auth: AuthSettings = dataclasses.field(default_factory=AuthSettings)  # ha/broker/auth.py

    def __post_init__(self) -> None:
        for key, value in (("brokerClusterName", self.broker_cluster_name),
                           ("brokerName", self.broker_name)):
            if not _NAME.match(value):
                raise ConfigError(key, f"{value!r} must match {_NAME.pattern}")
        _range("brokerId", self.broker_id, 0, 1 << 20)
        check_advertised_host("brokerIP1", self.broker_ip)
        if self.broker_ip2:
            check_advertised_host("brokerIP2", self.broker_ip2)
        for key, value in (("bindAddress", self.bind_address),
                           ("haBindAddress", self.ha_bind_address)):
            if value:
                check_bind_host(key, value)
        _range("listenPort", self.listen_port, 0, 65535)
        _range("metricsPort", self.metrics_port, 0, 65535)
        _range("logFileBytesMax", self.log_file_bytes_max, 4096, 1 << 40)
        _range("logFilesKept", self.log_files_kept, 1, 1000)
        _range("defaultTopicQueueNums", self.default_topic_queue_nums, 1, 1024)
        _range("longPollingMax", self.long_polling_max, 1, 100_000)
        _range("longPollingWaitMaxMs", self.long_polling_wait_max_ms, 0, 3_600_000)
        _range("shutdownGraceMs", self.shutdown_grace_ms, 0, 3_600_000)
        _range("handoverTimeoutMs", self.handover_timeout_ms, 0, 600_000)
        _range("putRowsMax", self.put_rows_max, 1, self.store.batch_messages_max)
        _range("putBatchBytesMax", self.put_batch_bytes_max, 1024, 1 << 31)
        _range("putStreamsMax", self.put_streams_max, 1, 1_000_000)
        _range("queuesMax", self.queues_max, 0, 1 << 30)
        self._check_controller_mode()
        if not self.enable_controller_mode and (
                self.ha.broker_role.is_master != (self.broker_id == 0)):
            raise ConfigError("brokerId", f"{self.broker_id} with brokerRole="
                              f"{self.ha.broker_role.value}: brokerId 0 is the master, any "
                              "other id a SLAVE")
        if self.auth.authentication_enabled and not (self.auth.acl_file
                                                     or self.enable_controller_mode):
            raise ConfigError("aclFile", "required with authenticationEnabled=true in static "
                              "mode (controller mode gets users and ACLs from the controller)")
        _range("idempotenceProducersMax", self.idempotence_producers_max, 1, 10_000_000)
        _range("idempotenceRebuildMessages", self.idempotence_rebuild_messages, 0, 1 << 24)
        _range("idempotenceRebuildWindowMs", self.idempotence_rebuild_window_ms, 0, 1 << 40)
        _range("idempotenceBatchesKept", self.idempotence_batches_kept, 1, 1000)
        _range("flushConsumerOffsetInterval", self.flush_consumer_offset_interval_ms, 100,
               3_600_000)
        if self.topic_table_default not in TABLE_FORMATS:
            raise ConfigError("topicTableDefault", f"{self.topic_table_default!r} is not one of "
                              f"{list(TABLE_FORMATS)}")
        _range("topicTableIntervalMs", self.topic_table_interval_ms, 10, 3_600_000)
        _range("topicTableCommitRowsMax", self.topic_table_commit_rows_max, 1, 100_000_000)
        _range("topicTableCommitBytesMax", self.topic_table_commit_bytes_max, 1 << 16, 1 << 32)
        _range("topicTableNice", self.topic_table_nice, 0, 19)
        _range("topicTableMaintenanceIntervalMs", self.topic_table_maintenance_interval_ms,
               1000, 7 * 86_400_000)
        _range("topicTableTargetFileBytes", self.topic_table_target_file_bytes, 1 << 20,
               1 << 32)
        _range("topicTableVacuumHours", self.topic_table_vacuum_hours, 0, 100 * 8760)
        _range("topicTableRetentionHours", self.topic_table_retention_hours, 0, 100 * 8760)

    def _check_controller_mode(self) -> None:
        _range("brokerHeartbeatInterval", self.broker_heartbeat_interval_ms, 10, 60_000)
        _range("controllerRequestTimeoutMs", self.controller_request_timeout_ms, 10, 600_000)
        _range("controllerRedirectsMax", self.controller_redirects_max, 0, 16)
        _range("masterLeaseMs", self.master_lease_ms, 10, 600_000)
        if len(self.controller_addr) > 16:
            raise ConfigError("controllerAddr", "more than 16 controller addresses")
        for address in self.controller_addr:
            try:
                parse_host_port(address)
            except BadValueError as err:
                raise ConfigError("controllerAddr", err.reason) from None
        if self.enable_controller_mode and not self.controller_addr:
            raise ConfigError("controllerAddr", "required with enableControllerMode=true")

    @property
    def runtime_roles(self) -> bool:
        """Controller mode with replicas: the controller, not brokerRole, makes this broker
        master or slave, and may change it while it runs (ha/broker/roles.py)."""
        return self.enable_controller_mode and self.ha.replicated

    @property
    def store_dir(self) -> Path:
        return Path(self.store_path_root_dir)

    @property
    def endpoint(self) -> str:
        return f"{self.broker_ip}:{self.listen_port}"

    @property
    def ha_host(self) -> str:
        """The host slaves dial for this broker's haListenPort (brokerIP2)."""
        return self.broker_ip2 or self.broker_ip

    def plaintext_refusal(self) -> str | None:
        """Why this broker must not start as configured (conf.tls)."""
        binds = {"bindAddress": self.client_bind_host}
        if self.ha.replicated:
            binds["haBindAddress"] = self.ha_bind_host
        return plaintext_refusal(self.tls, self.allow_insecure, binds,
                                 authenticated=self.auth.authentication_enabled,
                                 client_keys=("bindAddress",))

    @property
    def client_bind_host(self) -> str:
        return self.bind_address or self.broker_ip

    @property
    def ha_bind_host(self) -> str:
        return self.ha_bind_address or self.ha_host

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> BrokerConfig:
        unknown = sorted(set(properties) - BROKER_KEYS)
        if unknown:
            raise ConfigError(unknown[0], f"{unknown_key_message(unknown[0], BROKER_KEYS)} "
                              f"(known: see conf/broker.conf); all unknown: {unknown}")
        kwargs: dict[str, Any] = {}
        for key, (field, parse) in _KEYS.items():
            if key in properties:
                try:
                    kwargs[field] = parse(properties[key].strip())
                except ValueError as err:
                    raise ConfigError(key, f"bad value {properties[key]!r}: {err}") from err
        store_properties = {k: v for k, v in properties.items() if k in STORE_PROPERTY_KEYS}
        kwargs["store"] = StoreConfig.from_properties(store_properties)
        kwargs["ha"] = HAConfig.from_properties(
            {k: v for k, v in properties.items() if k in HA_PROPERTY_KEYS})
        try:
            kwargs["tls"] = check_files(TLSSettings.from_properties(properties))
        except TLSConfigError as err:
            raise ConfigError(err.key, err.message) from err
        auth, errors = parse_auth_settings(properties)
        if errors:
            key, _, reason = errors[0].partition(": ")
            raise ConfigError(key, reason)
        kwargs["auth"] = AuthSettings(**auth)
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> BrokerConfig:
        return cls.from_properties(parse_properties(Path(path).read_text(), str(path)))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """A broker conf's settings (conf/properties.py), its errors as ConfigError naming the
    source and line."""
    try:
        return conf.parse_properties(text, source)
    except conf.PropertiesError as err:
        raise ConfigError(err.location, err.reason) from err


def _range(key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ConfigError(key, f"{value} not in [{low}, {high}]")


_KEYS: dict[str, tuple[str, Any]] = {
    "brokerClusterName": ("broker_cluster_name", str),
    "brokerName": ("broker_name", str),
    "brokerId": ("broker_id", int),
    "brokerIP1": ("broker_ip", str),
    "brokerIP2": ("broker_ip2", str),
    "bindAddress": ("bind_address", str),
    "haBindAddress": ("ha_bind_address", str),
    "listenPort": ("listen_port", int),
    "storePathRootDir": ("store_path_root_dir", str),
    "autoCreateTopicEnable": ("auto_create_topic_enable", parse_bool),
    "defaultTopicQueueNums": ("default_topic_queue_nums", int),
    "longPollingMax": ("long_polling_max", int),
    "longPollingWaitMaxMs": ("long_polling_wait_max_ms", int),
    "shutdownGraceMs": ("shutdown_grace_ms", int),
    "handoverTimeoutMs": ("handover_timeout_ms", int),
    "putRowsMax": ("put_rows_max", int),
    "putBatchBytesMax": ("put_batch_bytes_max", int),
    "putStreamsMax": ("put_streams_max", int),
    "queuesMax": ("queues_max", int),
    "idempotenceProducersMax": ("idempotence_producers_max", int),
    "idempotenceRebuildMessages": ("idempotence_rebuild_messages", int),
    "idempotenceRebuildWindowMs": ("idempotence_rebuild_window_ms", int),
    "idempotenceBatchesKept": ("idempotence_batches_kept", int),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval_ms", int),
    "enableControllerMode": ("enable_controller_mode", parse_bool),
    "controllerAddr": ("controller_addr", controller_addresses),
    "brokerHeartbeatInterval": ("broker_heartbeat_interval_ms", int),
    "controllerRequestTimeoutMs": ("controller_request_timeout_ms", int),
    "controllerRedirectsMax": ("controller_redirects_max", int),
    "masterLeaseMs": ("master_lease_ms", int),
    "metricsPort": ("metrics_port", int),
    "metricsBearerTokenFile": ("metrics_bearer_token_file", str),
    "metricsPlaintext": ("metrics_plaintext", parse_bool),
    "logFile": ("log_file", str),
    "logFileBytesMax": ("log_file_bytes_max", int),
    "logFilesKept": ("log_files_kept", int),
    "allowInsecure": ("allow_insecure", parse_bool),
    "topicTableDefault": ("topic_table_default", str),
    "topicTableIntervalMs": ("topic_table_interval_ms", int),
    "topicTableCommitRowsMax": ("topic_table_commit_rows_max", int),
    "topicTableCommitBytesMax": ("topic_table_commit_bytes_max", int),
    "topicTableNice": ("topic_table_nice", int),
    "topicTableMaintenanceIntervalMs": ("topic_table_maintenance_interval_ms", int),
    "topicTableTargetFileBytes": ("topic_table_target_file_bytes", int),
    "topicTableVacuumHours": ("topic_table_vacuum_hours", int),
    "topicTableRetentionHours": ("topic_table_retention_hours", int),
}
BROKER_KEYS = (frozenset(_KEYS) | STORE_PROPERTY_KEYS | HA_PROPERTY_KEYS | frozenset(TLS_KEYS)
               | frozenset(AUTH_KEYS))


# The live keys: `rocketha-admin broker config set` applies them at once (ha/broker/live_config.py).
# Each is read at every use from the broker's current config, never copied into something built at
# start-up: the request handlers read BrokerService.config, the topic tables' thread its own
# TopicTables.config (replaced together, one object: a reader sees the old config or the new, not
# a mix of the two). Every other key is written to the conf file and applies at the next start.
LIVE_KEYS = frozenset({
    "autoCreateTopicEnable",  # produce of an unknown topic (ha/broker/produce.py)
    "defaultTopicQueueNums",  # auto-created topics, `topic create` without counts
    "longPollingWaitMaxMs",  # each long poll (ha/broker/long_poll.py)
    "putBatchBytesMax",  # each produce batch
    "putRowsMax",  # each produce batch
    "putStreamsMax",  # each new produce stream
    "shutdownGraceMs",  # at SIGTERM (ha/broker/main.py)
    "topicTableIntervalMs",  # each table pass (ha/broker/topic_tables.py)
    "topicTableMaintenanceIntervalMs",  # each table upkeep schedule
    "topicTableTargetFileBytes",  # each upkeep (compaction)
    "topicTableVacuumHours",  # each upkeep (vacuum)
    "topicTableRetentionHours",  # each upkeep (the table's retention)
})
# keys whose values `broker config get` never shows (BROKER_KEYS holds them)
SECRET_KEYS = frozenset({"tieredS3SecretAccessKey"})
MASKED = "******"


def live_update(config: BrokerConfig, described: BrokerConfig, key: str) -> BrokerConfig:
    """`config` (the running one) with live key `key` taken from `described` (what the conf
    file now says, parsed as at start-up). Raises ConfigError if it does not fit the rest."""
    assert key in LIVE_KEYS, key
    field = _KEYS[key][0]
    return dataclasses.replace(config, **{field: getattr(described, field)})


def effective_properties(config: BrokerConfig,
                         start_properties: Mapping[str, str]) -> dict[str, str]:
    """Every key this broker runs with that has a value: the broker's own keys from its
    running config (defaults included), the store's, replication's, TLS and authentication
    keys as its conf file set them at start (they never change while it runs); secrets
    masked. Sorted by key."""
    values = {**start_properties, **top_level_properties(config)}
    return {key: MASKED if key in SECRET_KEYS and values[key] else values[key]
            for key in sorted(values) if key in BROKER_KEYS}


def top_level_properties(config: BrokerConfig) -> dict[str, str]:
    """The broker's own keys (not the store's or replication's) with their current values."""
    values = {}
    for key, (field, _) in _KEYS.items():
        value = getattr(config, field)
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, tuple):
            value = ",".join(value)
        values[key] = str(value)
    return values

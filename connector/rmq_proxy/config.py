"""ProxyConfig: the gRPC endpoint's `key=value` properties file (RocketMQ style).

Only the entry point reads the file; everything else receives the frozen config. An unknown key
or a bad value stops start-up with a ProxyConfigError naming the key.

    grpcListenPort=8081            MessagingService port (0 = off: the proxy refuses to start)
    grpcBindAddress=127.0.0.1      what the listener binds ("0.0.0.0": every interface)
    grpcAdvertisedHost=127.0.0.1   the host clients are told in routes (never a wildcard)
    controllerAddr=h:p[;h:p]       the controllers' client endpoints (routes, replica sets)
    grpcReceiptHandleKeyFile=...   HMAC key of receipt handles (0600 file; "" = random per
                                   start: handles then do not survive a proxy restart)
    grpcAuthenticationEnabled=false  true: every RocketMQ client signs with the AK/SK of a
                                   user of the controllers (users.py), and the proxy calls the
                                   cluster as that user (its ACLs apply); needs clientConfig
                                   with a Super user's keys. Required when clientConfig has
                                   keys (a secured cluster): an open proxy would act as them.
    grpcAuthClockSkewMs=120000     the signed x-mq-date-time may be this far from our clock
    grpcAuthClientUtcOffsets=      more UTC offsets the clients' local dates may be in
                                   ("+08:00,-05:30"; "any"; "" = UTC and this host's): auth.py
    grpcAuthRefreshIntervalMs=5000 the users are fetched again when older than this
    grpcTlsCertFile=, grpcTlsKeyFile=   PEM files: the port speaks TLS (clients: tls_enable)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import conf
from conf import BadValueError, parse_bool, unknown_key_message
from connector.rmq_proxy.auth import parse_utc_offsets

__all__ = ["PROXY_KEYS", "ProxyConfig", "ProxyConfigError", "parse_properties"]


class ProxyConfigError(ValueError):
    """A configuration key has a bad value; the message names the key."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    listen_port: int = 8081  # grpcListenPort
    bind_address: str = "127.0.0.1"  # grpcBindAddress
    advertised_host: str = ""  # grpcAdvertisedHost ("" = grpcBindAddress)
    controller_addr: str = ""  # controllerAddr
    # clientConfig: a client.properties (ClientConfig.from_properties) for the proxy's own
    # calls to controllers and brokers: TLS trust and client certificate on a secured cluster
    client_config: str = ""
    receipt_handle_key_file: str = ""  # grpcReceiptHandleKeyFile
    authentication_enabled: bool = False  # grpcAuthenticationEnabled
    auth_clock_skew_ms: int = 120_000  # grpcAuthClockSkewMs
    auth_client_utc_offsets: str = ""  # grpcAuthClientUtcOffsets (auth.parse_utc_offsets)
    auth_refresh_interval_ms: int = 5000  # grpcAuthRefreshIntervalMs
    tls_cert_file: str = ""  # grpcTlsCertFile: PEM chain; with grpcTlsKeyFile, TLS on the port
    tls_key_file: str = ""  # grpcTlsKeyFile: PEM private key (0600)
    threads_max: int = 128  # grpcThreadsMax: server threads (telemetry streams hold one each)
    message_body_bytes_max: int = 4 << 20  # grpcMaxBodyBytes (the brokers' maxMessageSize)
    request_timeout_ms: int = 3000  # grpcClusterRequestTimeoutMs: one call to a broker
    send_deadline_ms: int = 10_000  # grpcSendDeadlineMs: a put's retries (failover) end here
    producers_per_set: int = 8  # grpcProducersPerReplicaSet: concurrent puts per replica set
    route_ttl_ms: int = 2000  # grpcRouteTtlMs: topic routes and members are asked again after
    invisible_duration_min_ms: int = 10_000  # grpcInvisibleDurationMinMs (RocketMQ: 10 s)
    invisible_duration_max_ms: int = 43_200_000  # grpcInvisibleDurationMaxMs (12 h)
    long_polling_max_ms: int = 30_000  # grpcLongPollingMaxMs: cap on a receive's wait
    receive_batch_max: int = 32  # grpcReceiveBatchMax: messages in one receive
    inflight_messages_max: int = 10_000  # grpcInflightMessagesMax: per group and queue
    consumer_queues_max: int = 100_000  # grpcConsumerQueuesMax: (group, topic, queue) states
    max_delivery_attempts: int = 16  # grpcMaxDeliveryAttempts (told to consumers)
    snapshot_interval_ms: int = 10_000  # grpcStateSnapshotIntervalMs
    # grpcFifoConsumption: a message with a message group is not delivered while an earlier
    # one of its group (same queue) is in flight, for every consumer group
    fifo_consumption: bool = True
    log_file: str = ""  # logFile ("" = standard error)

    def __post_init__(self) -> None:
        _range("grpcListenPort", self.listen_port, 0, 65535)
        if not self.controller_addr.strip():
            raise ProxyConfigError("controllerAddr", "required (host:port[;host:port...])")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ProxyConfigError("grpcTlsCertFile" if not self.tls_cert_file
                                   else "grpcTlsKeyFile",
                                   "TLS needs both grpcTlsCertFile and grpcTlsKeyFile")
        if self.advertised_host in ("0.0.0.0", "::"):
            raise ProxyConfigError("grpcAdvertisedHost", "a wildcard cannot be dialled")
        for key, value, low, high in (
                ("grpcThreadsMax", self.threads_max, 4, 10_000),
                ("grpcMaxBodyBytes", self.message_body_bytes_max, 1, 1 << 30),
                ("grpcClusterRequestTimeoutMs", self.request_timeout_ms, 1, 600_000),
                ("grpcSendDeadlineMs", self.send_deadline_ms, 1, 600_000),
                ("grpcProducersPerReplicaSet", self.producers_per_set, 1, 1024),
                ("grpcRouteTtlMs", self.route_ttl_ms, 0, 600_000),
                ("grpcInvisibleDurationMinMs", self.invisible_duration_min_ms, 1, 86_400_000),
                ("grpcInvisibleDurationMaxMs", self.invisible_duration_max_ms, 1, 86_400_000),
                ("grpcLongPollingMaxMs", self.long_polling_max_ms, 0, 600_000),
                ("grpcReceiveBatchMax", self.receive_batch_max, 1, 1024),
                ("grpcInflightMessagesMax", self.inflight_messages_max, 1, 1_000_000),
                ("grpcConsumerQueuesMax", self.consumer_queues_max, 1, 10_000_000),
                ("grpcMaxDeliveryAttempts", self.max_delivery_attempts, 1, 1000),
                ("grpcStateSnapshotIntervalMs", self.snapshot_interval_ms, 100, 86_400_000),
                ("grpcAuthClockSkewMs", self.auth_clock_skew_ms, 1000, 86_400_000),
                ("grpcAuthRefreshIntervalMs", self.auth_refresh_interval_ms, 100,
                 3_600_000)):
            _range(key, value, low, high)
        try:
            parse_utc_offsets(self.auth_client_utc_offsets)
        except ValueError as err:
            raise ProxyConfigError("grpcAuthClientUtcOffsets", str(err)) from None
        if self.invisible_duration_min_ms > self.invisible_duration_max_ms:
            raise ProxyConfigError("grpcInvisibleDurationMinMs",
                                   "must be <= grpcInvisibleDurationMaxMs")

    @property
    def endpoint(self) -> str:
        """host:port clients dial (routes name it)."""
        return f"{self.advertised_host or self.bind_address}:{self.listen_port}"

    @classmethod
    def from_properties(cls, values: Mapping[str, str]) -> ProxyConfig:
        fields: dict[str, object] = {}
        for key, raw in values.items():
            if key == "grpcCredentialsFile":
                raise ProxyConfigError(key, "gone: set grpcAuthenticationEnabled=true (the "
                                       "clients are checked against the controllers' users)")
            if key not in PROXY_KEYS:
                raise ProxyConfigError(key, f"{unknown_key_message(key, PROXY_KEYS)} (known: "
                                       f"{', '.join(sorted(PROXY_KEYS))})")
            name, kind = PROXY_KEYS[key]
            if kind is bool:
                try:
                    fields[name] = parse_bool(raw)
                except BadValueError as err:
                    raise ProxyConfigError(key, err.reason) from None
            elif kind is int:
                try:
                    fields[name] = int(raw)
                except ValueError:
                    raise ProxyConfigError(key, f"{raw!r} is not an integer") from None
            else:
                fields[name] = raw.strip()
        return cls(**fields)  # type: ignore[arg-type]

    @classmethod
    def from_file(cls, path: str | Path) -> ProxyConfig:
        return cls.from_properties(parse_properties(Path(path).read_text(), str(path)))


PROXY_KEYS: dict[str, tuple[str, type]] = {
    "grpcListenPort": ("listen_port", int),
    "grpcBindAddress": ("bind_address", str),
    "grpcAdvertisedHost": ("advertised_host", str),
    "controllerAddr": ("controller_addr", str),
    "clientConfig": ("client_config", str),
    "grpcReceiptHandleKeyFile": ("receipt_handle_key_file", str),
    "grpcAuthenticationEnabled": ("authentication_enabled", bool),
    "grpcAuthClockSkewMs": ("auth_clock_skew_ms", int),
    "grpcAuthClientUtcOffsets": ("auth_client_utc_offsets", str),
    "grpcAuthRefreshIntervalMs": ("auth_refresh_interval_ms", int),
    "grpcTlsCertFile": ("tls_cert_file", str),
    "grpcTlsKeyFile": ("tls_key_file", str),
    "grpcThreadsMax": ("threads_max", int),
    "grpcMaxBodyBytes": ("message_body_bytes_max", int),
    "grpcClusterRequestTimeoutMs": ("request_timeout_ms", int),
    "grpcSendDeadlineMs": ("send_deadline_ms", int),
    "grpcProducersPerReplicaSet": ("producers_per_set", int),
    "grpcRouteTtlMs": ("route_ttl_ms", int),
    "grpcInvisibleDurationMinMs": ("invisible_duration_min_ms", int),
    "grpcInvisibleDurationMaxMs": ("invisible_duration_max_ms", int),
    "grpcLongPollingMaxMs": ("long_polling_max_ms", int),
    "grpcReceiveBatchMax": ("receive_batch_max", int),
    "grpcInflightMessagesMax": ("inflight_messages_max", int),
    "grpcConsumerQueuesMax": ("consumer_queues_max", int),
    "grpcMaxDeliveryAttempts": ("max_delivery_attempts", int),
    "grpcStateSnapshotIntervalMs": ("snapshot_interval_ms", int),
    "grpcFifoConsumption": ("fifo_consumption", bool),
    "logFile": ("log_file", str),
}


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """A proxy conf's settings (conf/properties.py), its errors as ProxyConfigError naming the
    source and line."""
    try:
        return conf.parse_properties(text, source)
    except conf.PropertiesError as err:
        raise ProxyConfigError(err.location, err.reason) from err


def _range(key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ProxyConfigError(key, f"{value} is outside {low}..{high}")

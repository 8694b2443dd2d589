"""ControllerConfig: a controller's `key=value` properties file (RocketMQ's names where they exist).

    controllerDLegerGroup=RocketHAController        name of the controller group (logs only)
    controllerDLegerPeers=n1-127.0.0.1:9880;n2-127.0.0.1:9881;n3-127.0.0.1:9882
                                                    Raft addresses of all 1, 3 or 5 controllers
    controllerDLegerSelfId=n1                       which of them this process is
    controllerAddr=127.0.0.1:9876;127.0.0.1:9877;127.0.0.1:9878
                                                    client endpoints (Arrow Flight), in peer order
    controllerBindAddress=0.0.0.0                   host both listeners bind (default: this
                                                    node's own hosts in the two lists above)
    controllerStorePath=./store/controller-n1       Raft log, hard state and snapshots
    controllerHeartbeatTimeoutMs=3000               a broker silent this long is dead
    heartbeatTransitMaxMs=                          a heartbeat longer on the way than this
                                                    counts as heard this long after it was
                                                    made (default: a third of the timeout;
                                                    0 = at its arrival; controller/liveness.py)
    scanNotActiveBrokerIntervalMs=500               how often the leader looks for dead masters
    enableElectUncleanMaster=false                  elect outside the SyncStateSet (may lose data)
    raftTickIntervalMs=50                           one Raft tick
    raftElectionTimeoutTicks=10                     followers campaign after 10-20 silent ticks
    raftHeartbeatIntervalTicks=1
    raftFrameBytesMax=8388608                       largest frame accepted from a peer
    raftSendQueueMax=4096                           messages queued per peer (then dropped)
    raftConnectionsMax=16                           inbound Raft connections at once (more are
                                                    closed at accept)
    raftIdleTimeoutMs=60000                         an inbound connection silent this long is
                                                    closed (a peer reconnects when it has news)
    raftFrameTimeoutMs=5000                         a started frame must be whole within this
    snapshotEveryEntries=10000                      compact the Raft log after this many entries
    requestTimeoutMs=5000                           a client call waits this long for the log
    liveBrokersMax=10000                            brokers in the liveness table
    metricsPort=0                                   Prometheus /metrics (0 = off)
    consolePort=0                                   read-only web console (0 = off)
    consolePlaintext=false                          serve it as plain HTTP on a TLS member
    consoleCertPath= consoleKeyPath=                its own certificate (default: the member's)
    consoleSessionSeconds=3600                      a console login lasts this long
    metricsBearerTokenFile=                         a scrape may give this token (0600 file)
    metricsPlaintext=false                          serve /metrics as plain HTTP on a TLS member
    logFile=                                        log here, rotated by size (empty = stderr)
    logFileBytesMax=104857600                       rotate past this size
    logFilesKept=5                                  rotated files kept (logFile.1 ... .5)

Addresses: the peer list and controllerAddr are advertised addresses, the ones other
controllers, brokers and clients dial and the ones NOT_LEADER replies name; a wildcard host
(0.0.0.0) there is a ConfigError naming the key. Where this node listens is its own entry's host,
or controllerBindAddress (for both its Raft and client listeners) when set.

Only entry points read files; an unknown key or a bad value raises ConfigError naming the key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import conf
from conf import parse_bool, unknown_key_message
from conf.tls import TLS_KEYS, TLSConfigError, TLSSettings, plaintext_refusal
from conf.tls_reload import check_files
from controller.auth.verify import AUTH_KEYS, AuthSettings, parse_auth_settings
from controller.errors import ConfigError
from controller.raft import CLUSTER_SIZES, SNAPSHOT_BYTES_MAX

__all__ = ["CONTROLLER_KEYS", "ControllerConfig", "parse_properties"]

_PEER = re.compile(r"^n(\d+)-([0-9A-Za-z.\-]+):(\d+)$")
_ADDRESS = re.compile(r"^([0-9A-Za-z.\-]+):(\d+)$")


def _address(text: str) -> tuple[str, int]:
    match = _ADDRESS.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not host:port")
    port = int(match.group(2))
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    return match.group(1), port


def _advertised(text: str) -> str:
    """A host handed to other processes: never a wildcard (they could not dial it)."""
    try:
        wildcard = ipaddress.ip_address(text).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard:
        raise ValueError(f"{text!r} is a wildcard: other processes cannot dial it; advertise "
                         "this machine's address (bind to a wildcard with controllerBindAddress)")
    return text


def _bind_host(text: str) -> str:
    if not re.match(r"^[0-9A-Za-z.\-]{1,253}$", text):
        raise ValueError(f"{text!r} is not a host name or IPv4 address")
    return text


def _peers(text: str) -> tuple[tuple[int, str, int], ...]:
    peers = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        match = _PEER.match(item)
        if match is None:
            raise ValueError(f"{item!r} is not n<id>-host:port")
        host, port = _address(f"{match.group(2)}:{match.group(3)}")
        peers.append((int(match.group(1)), _advertised(host), port))
    return tuple(peers)


def _addresses(text: str) -> tuple[str, ...]:
    items = tuple(filter(None, (part.strip() for part in text.split(";"))))
    for item in items:
        _advertised(_address(item)[0])
    return items


def _self_id(text: str) -> int:
    if not re.match(r"^n\d+$", text):
        raise ValueError("expected n<id>")
    return int(text[1:])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ControllerConfig:
    group: str = "RocketHAController"
    peers: tuple[tuple[int, str, int], ...] = ((1, "127.0.0.1", 9880),)
    node_id: int = 1
    client_addresses: tuple[str, ...] = ("127.0.0.1:9876",)
    bind_address: str = ""  # controllerBindAddress ("": each listener's advertised host)
    store_path: str = "./store/controller-n1"
    heartbeat_timeout_ms: int = 3000
    # heartbeatTransitMaxMs (None: a third of heartbeat_timeout_ms; see transit_max_ms)
    heartbeat_transit_max_ms: int | None = None
    scan_interval_ms: int = 500
    master_probe_timeout_ms: int = 500
    unclean_election_enabled: bool = False
    tick_interval_ms: int = 50
    election_timeout_ticks: int = 10
    heartbeat_interval_ticks: int = 1
    frame_bytes_max: int = 8 << 20
    send_queue_max: int = 4096
    connections_max: int = 16
    idle_timeout_ms: int = 60_000
    frame_timeout_ms: int = 5000
    snapshot_every_entries: int = 10_000
    request_timeout_ms: int = 5000
    live_brokers_max: int = 10_000
    metrics_port: int = 0  # metricsPort, on the host of this node's client address
    console_port: int = 0  # consolePort, on the host of this node's client address
    # the console's and /metrics' access (controller/console/app.py, conf/metrics_http.py)
    console_plaintext: bool = False  # consolePlaintext
    console_cert_path: str = ""  # consoleCertPath ("" = tls.server.certPath)
    console_key_path: str = ""  # consoleKeyPath ("" = tls.server.keyPath)
    console_session_seconds: int = 3600  # consoleSessionSeconds
    metrics_bearer_token_file: str = ""  # metricsBearerTokenFile
    metrics_plaintext: bool = False  # metricsPlaintext
    log_file: str = ""  # logFile ("" = standard error)
    log_file_bytes_max: int = 100 << 20  # logFileBytesMax
    log_files_kept: int = 5  # logFilesKept
    tls: TLSSettings = dataclasses.field(default_factory=TLSSettings)  # tls.* (README)
    # allowInsecure: listen beyond loopback without TLS and authentication (else
    # rocketha-controller refuses to start)
    allow_insecure: bool = False
    # the signature checks and ACLs: controller/auth/verify.py
    auth: AuthSettings = dataclasses.field(default_factory=AuthSettings)

    def __post_init__(self) -> None:
        ids = [peer[0] for peer in self.peers]
        if len(ids) not in CLUSTER_SIZES or len(set(ids)) != len(ids) or min(ids) <= 0:
            raise ConfigError("controllerDLegerPeers",
                              f"must name {CLUSTER_SIZES} controllers with distinct ids > 0")
        if self.node_id not in ids:
            raise ConfigError("controllerDLegerSelfId", f"n{self.node_id} is not a peer")
        if len(self.client_addresses) != len(self.peers):
            raise ConfigError("controllerAddr", "must list one client address per peer")
        for key, value, low, high in (
            ("controllerHeartbeatTimeoutMs", self.heartbeat_timeout_ms, 100, 600_000),
            ("scanNotActiveBrokerIntervalMs", self.scan_interval_ms, 10, 600_000),
            ("masterProbeTimeoutMs", self.master_probe_timeout_ms, 10, 60_000),
            ("raftTickIntervalMs", self.tick_interval_ms, 1, 10_000),
            ("raftElectionTimeoutTicks", self.election_timeout_ticks, 2, 10_000),
            ("raftHeartbeatIntervalTicks", self.heartbeat_interval_ticks, 1, 10_000),
            ("raftFrameBytesMax", self.frame_bytes_max, 4096, SNAPSHOT_BYTES_MAX + 65536),
            ("raftSendQueueMax", self.send_queue_max, 16, 1_000_000),
            ("raftConnectionsMax", self.connections_max, 2, 4096),
            ("raftIdleTimeoutMs", self.idle_timeout_ms, 100, 3_600_000),
            ("raftFrameTimeoutMs", self.frame_timeout_ms, 10, 600_000),
            ("snapshotEveryEntries", self.snapshot_every_entries, 16, 10_000_000),
            ("requestTimeoutMs", self.request_timeout_ms, 100, 600_000),
            ("liveBrokersMax", self.live_brokers_max, 1, 1_000_000),
            ("metricsPort", self.metrics_port, 0, 65535),
            ("consolePort", self.console_port, 0, 65535),
            ("consoleSessionSeconds", self.console_session_seconds, 60, 7 * 86400),
            ("logFileBytesMax", self.log_file_bytes_max, 4096, 1 << 40),
            ("logFilesKept", self.log_files_kept, 1, 1000),
        ):
            if not low <= value <= high:
                raise ConfigError(key, f"{value} is outside [{low}, {high}]")
        if (self.heartbeat_transit_max_ms is not None
                and not 0 <= self.heartbeat_transit_max_ms < self.heartbeat_timeout_ms):
            raise ConfigError("heartbeatTransitMaxMs",
                              f"{self.heartbeat_transit_max_ms} must be at least 0 and below "
                              f"controllerHeartbeatTimeoutMs ({self.heartbeat_timeout_ms})")
        if self.election_timeout_ticks <= self.heartbeat_interval_ticks:
            raise ConfigError("raftElectionTimeoutTicks", "must be > raftHeartbeatIntervalTicks")

    @property
    def transit_max_ms(self) -> int:
        """heartbeatTransitMaxMs, its default filled in (liveness.heartbeat_credit_ms)."""
        if self.heartbeat_transit_max_ms is None:
            return self.heartbeat_timeout_ms // 3
        return self.heartbeat_transit_max_ms

    @property
    def voter_ids(self) -> tuple[int, ...]:
        return tuple(sorted(peer[0] for peer in self.peers))

    def raft_address(self, node_id: int) -> tuple[str, int]:
        for peer_id, host, port in self.peers:
            if peer_id == node_id:
                return host, port
        raise KeyError(node_id)

    def client_address(self, node_id: int) -> str:
        position = [peer[0] for peer in self.peers].index(node_id)
        return self.client_addresses[position]

    def plaintext_refusal(self) -> str | None:
        """Why this controller must not start as configured (conf/tls.py)."""
        return plaintext_refusal(self.tls, self.allow_insecure, {
            "controllerDLegerPeers (Raft)": self.raft_bind_address()[0],
            "controllerAddr (clients)": self.client_bind_address().rpartition(":")[0]},
            authenticated=self.auth.authentication_enabled,
            client_keys=("controllerAddr (clients)",))

    def raft_bind_address(self) -> tuple[str, int]:
        """Where this node's Raft listener binds (its advertised port)."""
        host, port = self.raft_address(self.node_id)
        return self.bind_address or host, port

    def client_bind_address(self) -> str:
        """`host:port` this node's client endpoint binds (its advertised port)."""
        host, _, port = self.client_address(self.node_id).rpartition(":")
        return f"{self.bind_address or host}:{port}"

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ControllerConfig:
        unknown = sorted(set(properties) - CONTROLLER_KEYS)
        if unknown:
            raise ConfigError(unknown[0], f"{unknown_key_message(unknown[0], CONTROLLER_KEYS)} "
                              f"(see conf/controller.conf); all unknown: {unknown}")
        auth, errors = parse_auth_settings(properties)
        if errors:
            key, _, reason = errors[0].partition(": ")
            raise ConfigError(key, reason)
        kwargs: dict[str, Any] = {"auth": AuthSettings(**auth)}
        for key, (field, parse) in _KEYS.items():
            if key in properties:
                try:
                    kwargs[field] = parse(properties[key].strip())
                except ValueError as err:
                    raise ConfigError(key, f"bad value {properties[key]!r}: {err}") from err
        try:
            kwargs["tls"] = check_files(TLSSettings.from_properties(properties))
        except TLSConfigError as err:
            raise ConfigError(err.key, err.message) from err
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> ControllerConfig:
        return cls.from_properties(parse_properties(Path(path).read_text(), str(path)))


_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "controllerDLegerGroup": ("group", str),
    "controllerDLegerPeers": ("peers", _peers),
    "controllerDLegerSelfId": ("node_id", _self_id),
    "controllerAddr": ("client_addresses", _addresses),
    "controllerBindAddress": ("bind_address", _bind_host),
    "controllerStorePath": ("store_path", str),
    "controllerHeartbeatTimeoutMs": ("heartbeat_timeout_ms", int),
    "heartbeatTransitMaxMs": ("heartbeat_transit_max_ms", int),
    "scanNotActiveBrokerIntervalMs": ("scan_interval_ms", int),
    "masterProbeTimeoutMs": ("master_probe_timeout_ms", int),
    "enableElectUncleanMaster": ("unclean_election_enabled", parse_bool),
    "raftTickIntervalMs": ("tick_interval_ms", int),
    "raftElectionTimeoutTicks": ("election_timeout_ticks", int),
    "raftHeartbeatIntervalTicks": ("heartbeat_interval_ticks", int),
    "raftFrameBytesMax": ("frame_bytes_max", int),
    "raftSendQueueMax": ("send_queue_max", int),
    "raftConnectionsMax": ("connections_max", int),
    "raftIdleTimeoutMs": ("idle_timeout_ms", int),
    "raftFrameTimeoutMs": ("frame_timeout_ms", int),
    "snapshotEveryEntries": ("snapshot_every_entries", int),
    "requestTimeoutMs": ("request_timeout_ms", int),
    "liveBrokersMax": ("live_brokers_max", int),
    "metricsPort": ("metrics_port", int),
    "consolePort": ("console_port", int),
    "consolePlaintext": ("console_plaintext", parse_bool),
    "consoleCertPath": ("console_cert_path", str),
    "consoleKeyPath": ("console_key_path", str),
    "consoleSessionSeconds": ("console_session_seconds", int),
    "metricsBearerTokenFile": ("metrics_bearer_token_file", str),
    "metricsPlaintext": ("metrics_plaintext", parse_bool),
    "logFile": ("log_file", str),
    "logFileBytesMax": ("log_file_bytes_max", int),
    "logFilesKept": ("log_files_kept", int),
    "allowInsecure": ("allow_insecure", parse_bool),
}


CONTROLLER_KEYS = frozenset(_KEYS) | frozenset(TLS_KEYS) | frozenset(AUTH_KEYS)


def parse_properties(text: str, source: str) -> dict[str, str]:
    """A controller conf's settings (conf/properties.py), its errors as ConfigError naming the
    source and line."""
    try:
        return conf.parse_properties(text, source)
    except conf.PropertiesError as err:
        raise ConfigError(err.location, err.reason) from err

"""HAConfig: the replication settings of one broker, with RocketMQ's parameter names.

Field names are ours (units last); `HA_PROPERTY_KEYS` maps RocketMQ's keys onto them and
`HAConfig.from_properties` parses them, so conf files keep RocketMQ's vocabulary. Every invalid
value raises storage_engine.ConfigError naming the RocketMQ key.

Replication is active when `brokerRole=SLAVE` or `totalReplicas > 1`; a master with
`totalReplicas=1` is a standalone broker (no HA listener; its store confirms what it writes).

Why the defaults differ from RocketMQ's in two places: `haTransferBatchSize` is 4 MiB (RocketMQ:
32 KiB), because each frame costs a Python round of header packing, CRC, syscalls and an ack, and
at 32 KiB that overhead caps catch-up far below 200 MB/s; `haMaxGapNotInSync` keeps RocketMQ's
code default (256 MiB).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from conf import parse_bool
from storage_engine import ConfigError

__all__ = ["HA_PROPERTY_KEYS", "BrokerRole", "HAConfig"]

KiB = 1024
MiB = 1024 * KiB
TRANSFER_BATCH_BYTES_MAX = 32 * MiB
FRAME_OVERHEAD_BYTES = 64 * KiB  # header + fixed fields + slack, on top of the data


class BrokerRole(enum.Enum):
    SYNC_MASTER = "SYNC_MASTER"
    ASYNC_MASTER = "ASYNC_MASTER"
    SLAVE = "SLAVE"

    @property
    def is_master(self) -> bool:
        return self is not BrokerRole.SLAVE


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HAConfig:
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER  # brokerRole
    listen_port: int = 10912  # haListenPort (0 = any free port)
    master_address: str = ""  # haMasterAddress (host:port of the master's haListenPort)
    transfer_batch_bytes: int = 4 * MiB  # haTransferBatchSize
    heartbeat_interval_ms: int = 5000  # haSendHeartbeatInterval
    housekeeping_interval_ms: int = 20_000  # haHousekeepingInterval
    slave_not_catchup_max_ms: int = 15_000  # haMaxTimeSlaveNotCatchup
    slave_read_enable: bool = False  # slaveReadEnable
    total_replicas: int = 1  # totalReplicas
    in_sync_replicas: int = 1  # inSyncReplicas
    min_in_sync_replicas: int = 1  # minInSyncReplicas
    auto_in_sync_replicas: bool = False  # enableAutoInSyncReplicas
    gap_not_in_sync_bytes_max: int = 256 * MiB  # haMaxGapNotInSync
    all_ack_in_sync_state_set: bool = False  # allAckInSyncStateSet
    reconnect_interval_ms: int = 1000  # haReconnectInterval (slave: pause between attempts)
    links_max: int = 16  # haConnectionsMax (slave links a master accepts at once)
    metadata_sync_interval_ms: int = 1000  # haMetadataSyncInterval (topic/offset snapshots)
    # a new link must say SlaveHello within this (idle strangers do not keep haConnectionsMax
    # slots), and a started frame, or a send, must complete within haFrameTimeoutMs (a frame
    # sent one byte at a time does not hold a link for ever)
    handshake_timeout_ms: int = 5000  # haHandshakeTimeoutMs
    frame_timeout_ms: int = 10_000  # haFrameTimeoutMs

    def __post_init__(self) -> None:
        if not isinstance(self.broker_role, BrokerRole):
            raise ConfigError("brokerRole", f"{self.broker_role!r} is not one of "
                              f"{[role.value for role in BrokerRole]}")
        _range("haListenPort", self.listen_port, 0, 65535)
        _range("haTransferBatchSize", self.transfer_batch_bytes, 4 * KiB,
               TRANSFER_BATCH_BYTES_MAX)
        _range("haSendHeartbeatInterval", self.heartbeat_interval_ms, 10, 3_600_000)
        _range("haHousekeepingInterval", self.housekeeping_interval_ms, 20, 3_600_000)
        if self.housekeeping_interval_ms <= self.heartbeat_interval_ms:
            raise ConfigError("haHousekeepingInterval", f"{self.housekeeping_interval_ms} ms "
                              "must exceed haSendHeartbeatInterval "
                              f"({self.heartbeat_interval_ms} ms), or idle links are closed")
        _range("haMaxTimeSlaveNotCatchup", self.slave_not_catchup_max_ms, 1, 3_600_000)
        _range("totalReplicas", self.total_replicas, 1, 64)
        _range("inSyncReplicas", self.in_sync_replicas, 1, self.total_replicas)
        _range("minInSyncReplicas", self.min_in_sync_replicas, 1, self.in_sync_replicas)
        _range("haMaxGapNotInSync", self.gap_not_in_sync_bytes_max, 1, 1 << 50)
        _range("haReconnectInterval", self.reconnect_interval_ms, 1, 3_600_000)
        _range("haConnectionsMax", self.links_max, 1, 1024)
        _range("haMetadataSyncInterval", self.metadata_sync_interval_ms, 1, 3_600_000)
        _range("haHandshakeTimeoutMs", self.handshake_timeout_ms, 10, 3_600_000)
        _range("haFrameTimeoutMs", self.frame_timeout_ms, 10, 3_600_000)
        if self.broker_role is BrokerRole.SLAVE:
            host, sep, port = self.master_address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError("haMasterAddress", f"{self.master_address!r}: a SLAVE needs "
                                  "the master's host:haListenPort")

    @property
    def replicated(self) -> bool:
        """Does this broker take part in replication (else: a standalone master)?"""
        return self.broker_role is BrokerRole.SLAVE or self.total_replicas > 1

    @property
    def acks_on_master_alone(self) -> bool:
        """Is a put of a replicated SYNC_MASTER acknowledged once the master alone holds it
        (inSyncReplicas=1 without allAckInSyncStateSet)? Then a failover may lose the last
        acknowledged puts, as with Kafka's acks=1: worth a warning at start-up."""
        return (self.total_replicas > 1 and self.broker_role is not BrokerRole.SLAVE
                and self.in_sync_replicas == 1 and not self.all_ack_in_sync_state_set)

    @property
    def frame_body_bytes_max(self) -> int:
        """The largest frame body a link accepts (checked before anything is allocated)."""
        return self.transfer_batch_bytes + FRAME_OVERHEAD_BYTES

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> HAConfig:
        """Build from RocketMQ-named keys; reads only the keys in HA_PROPERTY_KEYS."""
        kwargs: dict[str, Any] = {}
        for key, (field, parse) in _PROPERTY_MAP.items():
            if key in properties:
                try:
                    kwargs[field] = parse(properties[key].strip())
                except (ValueError, KeyError) as err:
                    raise ConfigError(key, f"bad value {properties[key]!r}: {err}") from err
        return cls(**kwargs)


def _range(key: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, f"{value!r} not an integer in [{low}, {high}]")


def _role(text: str) -> BrokerRole:
    try:
        return BrokerRole[text]
    except KeyError:
        raise ValueError(f"expected one of {[role.value for role in BrokerRole]}") from None


_PROPERTY_MAP: dict[str, tuple[str, Any]] = {
    "brokerRole": ("broker_role", _role),
    "haListenPort": ("listen_port", int),
    "haMasterAddress": ("master_address", str),
    "haTransferBatchSize": ("transfer_batch_bytes", int),
    "haSendHeartbeatInterval": ("heartbeat_interval_ms", int),
    "haHousekeepingInterval": ("housekeeping_interval_ms", int),
    "haMaxTimeSlaveNotCatchup": ("slave_not_catchup_max_ms", int),
    "slaveReadEnable": ("slave_read_enable", parse_bool),
    "totalReplicas": ("total_replicas", int),
    "inSyncReplicas": ("in_sync_replicas", int),
    "minInSyncReplicas": ("min_in_sync_replicas", int),
    "enableAutoInSyncReplicas": ("auto_in_sync_replicas", parse_bool),
    "haMaxGapNotInSync": ("gap_not_in_sync_bytes_max", int),
    "allAckInSyncStateSet": ("all_ack_in_sync_state_set", parse_bool),
    "haReconnectInterval": ("reconnect_interval_ms", int),
    "haConnectionsMax": ("links_max", int),
    "haMetadataSyncInterval": ("metadata_sync_interval_ms", int),
    "haHandshakeTimeoutMs": ("handshake_timeout_ms", int),
    "haFrameTimeoutMs": ("frame_timeout_ms", int),
}
HA_PROPERTY_KEYS = frozenset(_PROPERTY_MAP)

"""Replication and the broker service (ha/broker). Depends on storage_engine, controller.api
and connector.protocol only (docs/design.md §2).

    ha/replication/frames.py          HA link frames (byte layouts)           sans-IO
    ha/replication/quorum.py          needAckNums, admission, confirm          pure functions
    ha/replication/slave_core.py      handshake decision, transfer checks      sans-IO state machine
    ha/replication/master_core.py     links, batching, heartbeats, SSS members sans-IO state machine
    ha/replication/master_quorum.py   acks that count, confirm, lease          (its mixin)
    ha/replication/master_effects.py  the master core's settings and effects   data
    ha/replication/role_core.py       controller-mode role decisions, lease   sans-IO
                                                                             (ha/broker/roles.py)
    ha/replication/link.py            framed blocking socket                   IO
    ha/replication/master_service.py  accept/read/send/tick threads, put wait  IO shell
    ha/replication/slave_service.py   connect, follow, reconnect               IO shell
    ha/replication/config.py          HAConfig (RocketMQ key names)
"""

from __future__ import annotations

from ha.replication.config import HA_PROPERTY_KEYS, BrokerRole, HAConfig
from ha.replication.errors import FrameError, LinkClosedError, ReplicationError
from ha.replication.master_service import MasterService
from ha.replication.slave_service import SlaveService

__all__ = [
    "HA_PROPERTY_KEYS",
    "BrokerRole",
    "FrameError",
    "HAConfig",
    "LinkClosedError",
    "MasterService",
    "ReplicationError",
    "SlaveService",
]

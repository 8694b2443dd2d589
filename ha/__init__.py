"""Replication and the broker service (ha/broker). Depends on storage_engine, controller.api
and connector.protocol only (DESIGN.md §2).

    ha/frames.py          HA link frames (byte layouts)           sans-IO
    ha/quorum.py          needAckNums, admission, confirm          pure functions
    ha/slave_core.py      handshake decision, transfer checks      sans-IO state machine
    ha/master_core.py     batching, heartbeats, SyncStateSet       sans-IO state machine
    ha/role_core.py       controller-mode role decisions, lease   sans-IO (ha/broker/roles.py)
    ha/link.py            framed blocking socket                   IO
    ha/master_service.py  accept/read/send/tick threads, put wait  IO shell
    ha/slave_service.py   connect, follow, reconnect               IO shell
    ha/config.py          HAConfig (RocketMQ key names)
"""

from __future__ import annotations

from ha.config import HA_PROPERTY_KEYS, BrokerRole, HAConfig
from ha.errors import FrameError, LinkClosedError, ReplicationError
from ha.master_service import MasterService
from ha.slave_service import SlaveService

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

"""Replication keys in a broker's properties: parsed into HAConfig, bad values rejected with a
ConfigError naming the key, roles consistent with brokerId (static roles).

Method: table of property sets through BrokerConfig.from_properties (the path the broker's
entry point takes); each bad row names the key the error must carry.
"""

from __future__ import annotations

import pytest

from ha.broker.config import BrokerConfig
from ha.replication.config import BrokerRole
from storage_engine import ConfigError

SLAVE = {"brokerRole": "SLAVE", "brokerId": "1", "haMasterAddress": "127.0.0.1:10912"}


def test_a_slave_and_a_quorum_master_parse() -> None:
    slave = BrokerConfig.from_properties({**SLAVE, "slaveReadEnable": "true"})
    assert slave.ha.broker_role is BrokerRole.SLAVE and slave.ha.slave_read_enable
    assert slave.ha.replicated
    master = BrokerConfig.from_properties({
        "brokerRole": "SYNC_MASTER", "totalReplicas": "3", "inSyncReplicas": "2",
        "minInSyncReplicas": "1", "enableAutoInSyncReplicas": "true", "haListenPort": "0"})
    assert master.ha.total_replicas == 3 and master.ha.in_sync_replicas == 2
    assert master.ha.auto_in_sync_replicas and master.ha.replicated
    assert not BrokerConfig.from_properties({}).ha.replicated  # standalone by default


@pytest.mark.parametrize(("properties", "key"), [
    ({"brokerRole": "MASTER"}, "brokerRole"),
    ({"brokerRole": "SLAVE", "brokerId": "1"}, "haMasterAddress"),
    ({**SLAVE, "haMasterAddress": "nohost"}, "haMasterAddress"),
    ({**SLAVE, "brokerId": "0"}, "brokerId"),
    ({"brokerRole": "SYNC_MASTER", "brokerId": "2"}, "brokerId"),
    ({"totalReplicas": "2", "inSyncReplicas": "3"}, "inSyncReplicas"),
    ({"totalReplicas": "3", "inSyncReplicas": "2", "minInSyncReplicas": "3"},
     "minInSyncReplicas"),
    ({"haSendHeartbeatInterval": "5000", "haHousekeepingInterval": "5000"},
     "haHousekeepingInterval"),
    ({"haTransferBatchSize": "100"}, "haTransferBatchSize"),
    ({"haListenPort": "70000"}, "haListenPort"),
    ({"enableAutoInSyncReplicas": "yes"}, "enableAutoInSyncReplicas"),
    ({"totalReplicas": "two"}, "totalReplicas"),
])
def test_bad_replication_settings_name_the_key(properties: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties(properties)
    assert key in str(caught.value)

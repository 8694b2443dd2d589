"""controller.api: the messages brokers and admin tools exchange with the controller.

Goal: every message survives a JSON round trip, malformed bodies raise CodecError naming the
field (never a crash), and a broker's role follows from a ReplicaInfo. Method: round-trip
sample values of every message and feed hand-made bad bodies.
"""

from __future__ import annotations

import json

import pytest

from controller.api import (
    ACTIONS,
    AlterSyncStateSetRequest,
    BrokerHeartbeat,
    BrokerMember,
    ElectMasterRequest,
    HeartbeatReply,
    ReplicaInfo,
    TopicInfo,
    role_of,
)
from controller.errors import CodecError

REPLICA = ReplicaInfo("c", "a", 2, "h:2", 3, (1, 2), 4, (BrokerMember(1, "h:1"),
                                                        BrokerMember(2, "h:2")))


def test_messages_round_trip_through_json() -> None:
    samples = [
        REPLICA,
        BrokerHeartbeat("c", "a", 1, "h:1", 3, 100, 90, 5, (TopicInfo("t", 8, 8, 6),)),
        AlterSyncStateSetRequest("a", 2, 3, (1, 2), 4),
        ElectMasterRequest("a"),
        HeartbeatReply("OK", None, role_of(REPLICA, 1)),
    ]
    for message in samples:
        wire = json.loads(json.dumps(message.to_json()))
        assert type(message).from_json(wire) == message


def test_defaults_fill_optional_fields() -> None:
    heartbeat = BrokerHeartbeat.from_json(
        {"cluster_name": "c", "broker_name": "a", "broker_id": 1, "broker_address": "h:1"})
    assert (heartbeat.master_epoch, heartbeat.topics) == (0, ())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "not a JSON object"),
        ({"broker_name": "a"}, "master_broker_id"),
        ({"broker_name": "a", "master_broker_id": "2", "master_epoch": 1,
          "sync_state_set": [1], "sync_state_set_epoch": 1}, "master_broker_id"),
        ({"broker_name": "a", "master_broker_id": 2, "master_epoch": True,
          "sync_state_set": [1], "sync_state_set_epoch": 1}, "master_epoch"),
        ({"broker_name": "a", "master_broker_id": 2, "master_epoch": 1,
          "sync_state_set": "1", "sync_state_set_epoch": 1}, "sync_state_set"),
        ({"broker_name": "x" * 300, "master_broker_id": 2, "master_epoch": 1,
          "sync_state_set": [1], "sync_state_set_epoch": 1}, "broker_name"),
    ],
)
def test_bad_bodies_raise_codec_errors_naming_the_field(body: object, field: str) -> None:
    with pytest.raises(CodecError, match=field):
        AlterSyncStateSetRequest.from_json(body)


def test_roles_follow_the_replica_info() -> None:
    assert role_of(REPLICA, 2).role == "master"
    assert role_of(REPLICA, 1).role == "slave"
    no_master = ReplicaInfo("c", "a", None, None, 4, (), 5, REPLICA.brokers)
    assert role_of(no_master, 1).role == "none"
    assert set(ACTIONS) >= {"register_broker", "broker_heartbeat", "alter_sync_state_set",
                            "elect_master", "get_routes", "cluster_list"}

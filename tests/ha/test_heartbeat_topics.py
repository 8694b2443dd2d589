"""The topics a broker's heartbeat reports: built again only when they changed (issue 42).

Goal: the cache never reports a stale topic list (a create, an update of a queue count or a
permission, a delete each show in the next heartbeat), and an unchanged list costs no new
TopicInfo. Method: HeartbeatTopics fed lists as TopicLog.all() returns them (the same config
objects while nothing changed), and the encoded heartbeat compared with one built afresh.
"""

from __future__ import annotations

from controller.api import BrokerHeartbeat, TopicInfo
from ha.broker.controller_link import HeartbeatTopics
from ha.broker.metadata import TopicConfig


def _fresh(topics: list[TopicConfig]) -> tuple[TopicInfo, ...]:
    return tuple(TopicInfo(t.name, t.read_queue_nums, t.write_queue_nums, t.perm)
                 for t in topics)


def test_unchanged_topics_reuse_the_infos_and_changes_show_at_once() -> None:
    infos = HeartbeatTopics()
    a, b = TopicConfig("a", 8, 8), TopicConfig("b", 4, 4)
    first = infos([a, b])
    assert first == _fresh([a, b])
    assert infos([a, b]) is first  # a new list of the same configs: nothing rebuilt
    changes = [
        [a, b, TopicConfig("c", 2, 2)],  # created
        [a, TopicConfig("b", 4, 16)],  # queue count updated (an equal name, a new config)
        [a, TopicConfig("b", 4, 16, perm=4)],  # made read-only
        [a],  # deleted
        [],
    ]
    for topics in changes:
        assert infos(topics) == _fresh(topics), topics


def test_the_heartbeat_encodes_as_before() -> None:
    """JsonMessage.to_json reads each class's field names once: the same JSON, round trip."""
    topics = [TopicConfig(f"q{index}", 8, 8) for index in range(3)]
    beat = BrokerHeartbeat("c", "broker-a", 0, "127.0.0.1:1", 1, 10, 5,
                           topics=HeartbeatTopics()(topics))
    raw = beat.to_json()
    assert raw["topics"] == [{"topic": f"q{index}", "read_queue_nums": 8,
                              "write_queue_nums": 8, "perm": 6} for index in range(3)]
    assert raw["max_log_position"] == 10 and raw["confirm_log_position"] == 5
    assert BrokerHeartbeat.from_json(raw) == beat

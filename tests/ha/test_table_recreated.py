"""A topic deleted and created again under the same name, while its table stays.

Goal: the new topic's rows never go into the old topic's table (the table is ahead of the new
queues: no commit of any queue, `ahead_queues` says which); once the old table is moved away,
the next pass starts a new table from the new topic's first offset. Method: a real store (its
delete_topic, as the broker's topic deletion) and real Delta tables, the thread's passes.
"""

from __future__ import annotations

from pathlib import Path

from ha.broker.metadata import TopicConfig
from storage_engine import MessageStore
from tests.ha.test_topic_table import (  # noqa: F401 - store is a fixture
    QUEUES,
    TOPIC,
    assert_exactly_once,
    put,
    rows,
    store,
    tables,
)


def test_a_recreated_topic_is_not_appended_to_the_old_table(store: MessageStore,  # noqa: F811
                                                            tmp_path: Path) -> None:
    service = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")])
    uri = str(tmp_path / "tier" / "tables" / TOPIC)
    put(store, 12)  # 4 per queue
    service.run_pass()
    old = rows(uri)
    store.delete_topic(TOPIC)
    put(store, 7)  # the new topic: queue 0 holds 3, queues 1 and 2 hold 2 (all behind 4)
    service.run_pass()
    assert rows(uri).equals(old)
    assert service.stats()["topics"][TOPIC]["ahead_queues"] == [0, 1, 2]
    put(store, 3, start=7)  # queue 0 reaches the old end (4), the others do not
    service.run_pass()
    assert rows(uri).equals(old)  # queue 0 alone would now "fit": still nothing is mixed in
    assert service.stats()["topics"][TOPIC]["ahead_queues"] == [1, 2]

    Path(uri).rename(tmp_path / "tier" / "tables" / "orders.old")  # the operator's remedy
    service.run_pass()
    assert_exactly_once(rows(uri), store)
    assert rows(uri).num_rows == 10
    assert service.stats()["topics"][TOPIC]["ahead_queues"] == []


def test_a_recreated_topic_past_the_old_ends_is_caught_by_its_last_rows(
        store: MessageStore, tmp_path: Path) -> None:  # noqa: F811
    """Offsets cannot tell once the new queues passed the old table's ends (a busy topic
    created again between two passes): the table's last row of each queue is compared with
    the store's message at that offset, by a writer that committed it and by a fresh one
    (after a restart or a failover it looks the row up in the table)."""
    topics = [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")]
    uri = str(tmp_path / "tier" / "tables" / TOPIC)
    service = tables(store, tmp_path, topics)
    put(store, 12)  # 4 per queue
    service.run_pass()
    put(store, 6, start=12)  # same topic: the next commit appends after its own rows
    service.run_pass()
    old = rows(uri)
    assert old.num_rows == 18
    store.delete_topic(TOPIC)
    put(store, 30, start=100)  # the new topic: 10 per queue, past the old ends (6)
    service.run_pass()
    assert rows(uri).equals(old)
    assert service.stats()["topics"][TOPIC]["ahead_queues"] == [0, 1, 2]
    fresh = tables(store, tmp_path, topics)  # a new master: marks looked up in the table
    fresh.run_pass()
    assert rows(uri).equals(old)
    assert fresh.stats()["topics"][TOPIC]["ahead_queues"] == [0, 1, 2]

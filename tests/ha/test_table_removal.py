"""Removing a deleted topic's table (ha/broker/table_removal.py, TopicTables.remove_table).

Goal: the table is removed only when asked and only once the topic is gone (asked while the
topic exists, the removal is refused and the table stays whole); once removed, later passes do
not start it again; removing a table that is not there says so and is no error; another
topic's table is untouched. Method: a real store and real Delta tables, the thread's passes,
the tier on the local filesystem (the S3 path is the same FileIO call, checked against moto's
server in tests/integration/test_topic_tables_s3.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ha.broker.metadata import TopicConfig
from storage_engine import MessageStore
from storage_engine.tiered import FileIO
from tests.ha.test_topic_table import (  # noqa: F401 - store is a fixture
    QUEUES,
    TOPIC,
    put,
    rows,
    store,
    tables,
)


def test_a_table_is_removed_only_when_its_topic_is_gone(store: MessageStore,  # noqa: F811
                                                        tmp_path: Path) -> None:
    topics = [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta"),
              TopicConfig("audit", QUEUES, QUEUES, table="delta")]
    service = tables(store, tmp_path, topics)
    put(store, 6)
    put(store, 3, topic="audit")
    service.run_pass()
    uri, other = tmp_path / "tier" / "tables" / TOPIC, tmp_path / "tier" / "tables" / "audit"
    assert rows(str(uri)).num_rows == 6 and rows(str(other)).num_rows == 3

    with pytest.raises(ValueError, match="still exists"):
        service.remove_table(TOPIC)
    assert rows(str(uri)).num_rows == 6  # refused: nothing removed

    del topics[0]  # the topic deleted (its config record applied)
    assert service.remove_table(TOPIC) is True
    assert not uri.exists()
    service.run_pass()
    service.run_pass()
    assert not uri.exists(), "a pass started the removed table again"
    assert TOPIC not in service.stats()["topics"]
    assert rows(str(other)).num_rows == 3  # the other topic's table is untouched
    assert service.remove_table(TOPIC) is False  # asked again: nothing there, no error


def test_delete_tree_needs_a_prefix(tmp_path: Path) -> None:
    tier = FileIO(f"file://{tmp_path}")
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"x")
    with pytest.raises(ValueError, match="non-empty prefix"):
        tier.delete_tree("/")
    assert tier.delete_tree("a") is True and not (tmp_path / "a").exists()
    assert tier.delete_tree("a") is False

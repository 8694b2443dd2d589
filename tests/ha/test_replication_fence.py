"""Controller-mode fence on the broker's replication hooks.

Goal: while fenced (the controller names another master) a broker refuses puts and settles with
NOT_MASTER naming that master, stores nothing, and a put that completed while the fence went
up is not acknowledged (FLUSH_SLAVE_TIMEOUT); lifting the fence accepts writes again. Method: a
real standalone store in a temporary directory behind `Replication`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.broker.config import BrokerConfig
from ha.broker.metadata import TopicConfig
from ha.broker.offset_log import OffsetLog
from ha.broker.replication import NotMasterError, Replication
from ha.broker.topic_log import TopicLog
from storage_engine import MessageBatch, MessageStore, PutResult, PutStatus


@pytest.fixture
def replication(tmp_path: Path) -> Iterator[Replication]:
    config = BrokerConfig.from_properties({"storePathRootDir": str(tmp_path / "store"),
                                           "mappedFileSizeCommitLog": str(8 << 20),
                                           "maxMessageSize": str(1 << 20)})
    store = MessageStore(config.store_dir, config.store, auto_confirm=True)
    replication: Replication | None = None

    def put(batch: MessageBatch) -> PutResult:  # the broker wires the offset log the same way
        assert replication is not None
        return replication.put(batch)

    offsets = OffsetLog(tmp_path / "c", store, flush_interval_ms=1000, write_timeout_ms=1000,
                        put=put)
    topics = TopicLog(tmp_path / "c", store, write_timeout_ms=1000, put=put)
    replication = Replication(config, store, endpoint="h:1", topics=topics, offsets=offsets)
    try:
        yield replication
    finally:
        replication.close()
        store.close()


def _batch() -> MessageBatch:
    return MessageBatch(topic="t", bodies=[b"x"], queue_ids=[0])


def test_a_fenced_broker_refuses_and_stores_nothing(replication: Replication) -> None:
    first = replication.put(_batch())
    assert first.status is PutStatus.PUT_OK
    replication.fence("the controller names broker 2 at h:2 master (epoch 3)")
    with pytest.raises(NotMasterError, match="h:2"):
        replication.put(_batch())
    with pytest.raises(NotMasterError, match="epoch 3"):
        replication.settle(first.log_position_end)
    replication.fence(None)
    again = replication.put(_batch())
    assert again.status is PutStatus.PUT_OK
    assert again.queue_offsets[0] == first.queue_offsets[0] + 1  # nothing stored while fenced


def test_a_put_completing_under_the_fence_is_not_acknowledged(
        replication: Replication) -> None:
    replication.fence("deposed")
    completed = replication._fenced_after(PutResult(PutStatus.PUT_OK, 10))
    assert completed.status is PutStatus.FLUSH_SLAVE_TIMEOUT and "deposed" in completed.error
    refused = replication._fenced_after(PutResult(PutStatus.FLUSH_DISK_TIMEOUT, 10))
    assert refused.status is PutStatus.FLUSH_DISK_TIMEOUT


def test_a_fenced_broker_acknowledges_no_offset_commit(replication: Replication) -> None:
    """A commit is a put (ha/broker/offset_log.py): a deposed broker refuses it like any put
    and writes nothing, so the new master never lacks a commit this one answered."""
    offsets = replication._offsets
    assert offsets.commit("g", "t", 0, 5).status is PutStatus.PUT_OK
    replication.fence("the controller names broker 2 at h:2 master (epoch 3)")
    with pytest.raises(NotMasterError):
        offsets.commit("g", "t", 0, 9)
    assert offsets.query("g", "t") == {"0": 5} and offsets.records_written == 1
    replication.fence(None)
    assert offsets.commit("g", "t", 0, 9).status is PutStatus.PUT_OK
    assert offsets.query("g", "t") == {"0": 9} and offsets.applied_queue_offset == 2


def test_a_fenced_broker_acknowledges_no_topic_change(replication: Replication) -> None:
    """A topic change is a put too (ha/broker/topic_log.py): a deposed broker refuses a create,
    an update and a delete, writes nothing, and its table keeps what was acknowledged."""
    topics = replication._topics
    assert topics.put(TopicConfig("t", 3, 3)).status is PutStatus.PUT_OK  # type: ignore[union-attr]
    replication.fence("the controller names broker 2 at h:2 master (epoch 3)")
    for change in (lambda: topics.put(TopicConfig("u", 1, 1)),
                   lambda: topics.put(TopicConfig("t", 8, 8)), lambda: topics.delete("t")):
        with pytest.raises(NotMasterError):
            change()
    assert topics.all() == [TopicConfig("t", 3, 3)] and topics.records_written == 1
    replication.fence(None)
    assert topics.delete("t").status is PutStatus.PUT_OK  # type: ignore[union-attr]
    assert topics.all() == [] and topics.applied_queue_offset == 2

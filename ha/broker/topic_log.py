"""Topic configs kept in the replica set's CommitLog, so a failover never loses one.

Why (issue 18, chaos finding 3): topic configs used to be answered once they were in the
master's config/topics.json, and reached slaves only with the HA metadata, at most every
haMetadataSyncInterval: a topic created (explicitly, or by a first put with
autoCreateTopicEnable) just before a failover was unknown to the new master (TOPIC_NOT_EXIST,
or auto-created again with the default queue count), and a delete could come back to life.
Now a create, update or delete is a record of TOPICS_TOPIC, written and replayed by the
machinery the consumer offsets use (ha/broker/system_log.py: answered only on PUT_OK, applied
by every replica below its confirm position and by a take-over up to the log end), folded by
the pure TopicTable (ha/broker/metadata.py). topics.json is the snapshot, written within
SNAPSHOT_INTERVAL_MS of a change and at close.

The cost lands where a topic changes: an explicit create pays one replicated put, and so does
the first put into an unknown topic (auto-create: the record is acknowledged before the first
message is written); every later put finds the topic in memory. A create that finds the same
config already applied writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ha.broker.descriptors import queue_limit_refusal, queues_max
from ha.broker.metadata import (
    TOPICS_MAX,
    TOPICS_TOPIC,
    TopicConfig,
    TopicTable,
    encode_delete,
    encode_put,
)
from ha.broker.system_log import SystemLog, SystemLogLimitError
from storage_engine import MessageBatch, MessageStore, PutResult

__all__ = ["TOPICS_TOPIC", "TopicLimitError", "TopicLog"]

SNAPSHOT_FILE = "topics.json"
SNAPSHOT_INTERVAL_MS = 1000  # topics change rarely: the snapshot follows within a second


class TopicLimitError(SystemLogLimitError):
    """A topic change refused before anything was written: TOPICS_MAX topics exist, or it
    would bring the broker past queuesMax queues."""


class TopicLog(SystemLog[TopicTable]):
    """The topic configs of one broker (see the module docstring). `get` finding the topic
    reads only the applied table (it is on every put's path); a miss, and `all`, first apply
    what was confirmed since the last pass (a slave serving reads lags by up to
    CATCH_UP_INTERVAL_MS otherwise)."""

    def __init__(self, config_dir: Path, store: MessageStore, *,
                 put: Callable[[MessageBatch], PutResult], write_timeout_ms: int) -> None:
        super().__init__(kind="topic", topic=TOPICS_TOPIC,
                         snapshot_path=config_dir / SNAPSHOT_FILE, store=store, put=put,
                         flush_interval_ms=SNAPSHOT_INTERVAL_MS,
                         write_timeout_ms=write_timeout_ms, load=TopicTable.from_json,
                         empty=TopicTable)

    # -- writes (master) --------------------------------------------------------------------
    def put(self, topic: TopicConfig, *, only_if_absent: bool = False,
            queues_max: int | None = None) -> PutResult | None:
        """Write and apply a create or update of `topic`; PUT_OK means it survives any
        failover the put rules cover. None: nothing written (the table already has this
        config, or, with `only_if_absent`, any config of that name). Raises TopicLimitError
        (past TOPICS_MAX topics, or past the broker's queuesMax when `queues_max` is its
        configured value: ha/broker/descriptors.py) or SystemLogLimitError before writing, or
        what the put raises (NOT_MASTER)."""

        def needed(table: TopicTable) -> bool:
            current = table.topics.get(topic.name)
            if current is None and len(table.topics) >= TOPICS_MAX:
                raise TopicLimitError(f"{TOPICS_MAX} topics exist (TOPICS_MAX)")
            write = current is None or (not only_if_absent and current != topic)
            if write and queues_max is not None:
                _check_queue_room(table, topic, current, queues_max)
            return write

        return self._write(encode_put(topic), needed=needed)

    def delete(self, name: str) -> PutResult | None:
        """Write and apply a delete of topic `name` (None: no such topic)."""
        return self._write(encode_delete(name), needed=lambda table: name in table.topics)

    # -- HA metadata ------------------------------------------------------------------------
    def metadata_json(self) -> dict[str, Any]:
        """What a master ships to its slaves (used only by a slave missing records that
        retention removed); "topics" keeps the shape slaves from before topic records read."""
        return self._read(lambda table: {
            "topics": [topic.to_json() for topic in table.sorted_topics()],
            "topics_applied_queue_offset": table.applied_queue_offset})

    def note_master_snapshot(self, decoded: dict[str, Any]) -> None:
        """A slave: keep the master's topics (TypeError/ValueError: malformed)."""
        self._note_master_snapshot(TopicTable.from_json({
            "topics": decoded.get("topics", []),
            "applied_queue_offset": decoded.get("topics_applied_queue_offset", 0)}))

    # -- reads ------------------------------------------------------------------------------
    def get(self, name: str) -> TopicConfig | None:
        topic = self._fold.topics.get(name)  # one dict read: no lock on the put path
        if topic is None:  # a replica may not have applied a recent create yet: catch up
            self.catch_up(wait=False)
            topic = self._fold.topics.get(name)
        return topic

    def all(self) -> list[TopicConfig]:
        self.catch_up(wait=False)
        return self._read(lambda table: table.sorted_topics())


def _queues(topic: TopicConfig) -> int:
    """The queues a topic may have on disk (its read and write counts can differ)."""
    return max(topic.read_queue_nums, topic.write_queue_nums)


def _check_queue_room(table: TopicTable, topic: TopicConfig, current: TopicConfig | None,
                      configured: int) -> None:
    """Refuse a change that adds queues past queuesMax (one that adds none always passes:
    a lowered limit never blocks a permission change)."""
    adding = _queues(topic) - (0 if current is None else _queues(current))
    if adding <= 0:
        return
    limit = queues_max(configured)
    total = sum(_queues(other) for other in table.topics.values()) + adding
    if total > limit:
        raise TopicLimitError(queue_limit_refusal(topic.name, adding, total, limit, configured))

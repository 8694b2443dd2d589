"""Topic configs as a fold over topic records (pure: no IO, no clock, no threads).

The records live in the replica set's CommitLog, in queue 0 of the internal topic TOPICS_TOPIC
(ha/broker/topic_log.py writes and reads them with the machinery of ha/broker/system_log.py).
A record's body is one JSON object, UTF-8, keys sorted:

    {"v": 1, "op": "put", "name": N, "read_queue_nums": R, "write_queue_nums": W, "perm": P,
     "table": T}                                  ("table" only when set: "none" or "delta")
    {"v": 1, "op": "delete", "name": N}

`TopicTable` is the state after applying the records with queue offsets
[0, applied_queue_offset) in queue-offset order (= log order): a put sets table[N] (create,
or update of queue counts / permission: the last one wins), a delete drops N. Every replica
holding the same records computes the same table, which is why a promoted slave knows every
topic the old master answered OK for (chaos finding 3). A record that does not decode (a newer
version, or damage), or a new topic past TOPICS_MAX, is counted and skipped, never applied
half, the same way on every replica.

The snapshot (config/topics.json, RocketMQ's file name) is `to_json()`: the topics plus the
`applied_queue_offset` it covers; a file from before topic records has no position and the
records are replayed from 0 on top of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ha.broker.system_record import (
    QUEUE_OFFSET_MAX,
    FoldPosition,
    decode_envelope,
    encode_envelope,
    int_in,
)
from storage_engine import topic_name_error

__all__ = ["PERM_READ", "PERM_WRITE", "QUEUE_NUMS_MAX", "TABLE_FORMATS", "TOPICS_MAX",
           "TOPICS_TOPIC", "TopicConfig", "TopicRecord", "TopicTable", "decode_topic_record",
           "encode_delete", "encode_put"]

PERM_READ = 4
PERM_WRITE = 2
PERM_MAX = 7
QUEUE_NUMS_MAX = 1024
TOPICS_MAX = 100_000  # topics one replica set keeps
TOPICS_TOPIC = "rmq_sys_rocketha_topics"  # one queue (0) per replica set
# a topic's `table` attribute: "" follows the broker's topicTableDefault, "none" or "delta"
# (materialized as a Delta table: docs/topic-tables.md)
TABLE_FORMATS = ("none", "delta")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    table: str = ""  # "" (the broker's topicTableDefault), or one of TABLE_FORMATS

    def to_json(self) -> dict[str, Any]:
        raw = dataclasses.asdict(self)
        if not self.table:
            del raw["table"]  # the records and snapshots of topics that never set one
        return raw

    def table_format(self, default: str) -> str:
        """"none" or "delta": the topic's own, else the broker's `default`."""
        return self.table or default

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRecord:
    """One decoded record: `op` is "put" (`topic` set) or "delete"."""

    op: str
    name: str
    topic: TopicConfig | None = None


def encode_put(topic: TopicConfig) -> bytes:
    return encode_envelope("put", topic.to_json())


def encode_delete(name: str) -> bytes:
    return encode_envelope("delete", {"name": name})


def decode_topic_record(body: bytes) -> TopicRecord:
    """The record in `body`; ValueError (naming what is wrong) for anything else."""
    op, raw = decode_envelope(body, "topic")
    name = raw.get("name")
    _check_name(name)
    if op == "delete":
        return TopicRecord("delete", name)
    if op != "put":
        raise ValueError(f"unknown op {op!r:.40}")
    return TopicRecord("put", name, topic_from_json(
        {key: raw[key] for key in ("name", "read_queue_nums", "write_queue_nums", "perm",
                                   "table") if key in raw}))


def topic_from_json(item: Any) -> TopicConfig:
    """A TopicConfig from its JSON object, every field checked (ValueError naming it;
    TypeError: not an object)."""
    if not isinstance(item, dict):
        raise TypeError("a topic config is a JSON object")
    name = item.get("name")
    _check_name(name)
    counts = (item.get("read_queue_nums"), item.get("write_queue_nums"))
    for count in counts:
        if not int_in(count, 1, QUEUE_NUMS_MAX):
            raise ValueError(f"topic {name}: queue count {count!r:.20}")
    perm = item.get("perm", PERM_READ | PERM_WRITE)
    if not int_in(perm, 0, PERM_MAX):
        raise ValueError(f"topic {name}: perm {perm!r:.20}")
    table = item.get("table", "")
    if table not in ("", *TABLE_FORMATS):
        raise ValueError(f"topic {name}: table {table!r:.20}")
    return TopicConfig(name, counts[0], counts[1], perm, table)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or topic_name_error(name) is not None:
        raise ValueError(f"bad topic name {name!r:.60}")


class TopicTable(FoldPosition):
    """The topics after the records [0, applied_queue_offset) of TOPICS_TOPIC (not
    thread-safe: ha/broker/system_log.py serializes every call)."""

    def __init__(self, topics: dict[str, TopicConfig] | None = None,
                 applied_queue_offset: int = 0) -> None:
        super().__init__(applied_queue_offset)
        self.topics: dict[str, TopicConfig] = topics if topics is not None else {}

    def apply(self, queue_offset: int, body: bytes) -> TopicRecord | None:
        """Apply the record at `queue_offset`, which must be the next one. Returns it, or None
        when it was skipped (undecodable, or a new topic past TOPICS_MAX)."""
        record = self._advance(queue_offset, body, decode_topic_record)
        if record is None:
            return None
        if record.topic is None:
            self.topics.pop(record.name, None)
            return record
        if record.name not in self.topics and len(self.topics) >= TOPICS_MAX:
            self.records_skipped += 1  # the broker refuses such a create before writing it
            return None
        self.topics[record.name] = record.topic
        return record

    def sorted_topics(self) -> list[TopicConfig]:
        return sorted(self.topics.values(), key=lambda topic: topic.name)

    def to_json(self) -> dict[str, Any]:
        return {"topics": [topic.to_json() for topic in self.sorted_topics()],
                "applied_queue_offset": self.applied_queue_offset}

    @classmethod
    def from_json(cls, raw: Any) -> TopicTable:
        """A snapshot written by `to_json` (or a topics.json from before topic records,
        without `applied_queue_offset`: the records are then replayed from 0 on top of it).
        TypeError/ValueError on a malformed one."""
        if not isinstance(raw, dict):
            raise TypeError("a topic snapshot is a JSON object")
        items = raw.get("topics", [])
        applied = raw.get("applied_queue_offset", 0)
        if not int_in(applied, 0, QUEUE_OFFSET_MAX):
            raise ValueError(f"applied_queue_offset {applied!r:.20}")
        if not isinstance(items, list) or len(items) > TOPICS_MAX:
            raise TypeError(f"topics must be a list of at most {TOPICS_MAX}")
        topics = {topic.name: topic for topic in map(topic_from_json, items)}
        return cls(topics, applied)

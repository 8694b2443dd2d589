"""Consumer-group offsets as a fold over offset records (pure: no IO, no clock, no threads).

The records live in the replica set's CommitLog, in queue 0 of the internal topic OFFSETS_TOPIC
(ha/broker/offset_log.py writes and reads them). A record's body is one JSON object, UTF-8:

    {"v": 1, "op": "commit", "group": G, "topic": T, "queue_id": Q, "queue_offset": N}
    {"v": 1, "op": "delete_group", "group": G}

`OffsetTable` is the state after applying the records with queue offsets
[0, applied_queue_offset) in queue-offset order (= log order): a commit sets
table[G][T][str(Q)] = N (the last one wins, as in Kafka: an operator may move a group back), a
delete_group drops G. Every replica holding the same records computes the same table, which is
why a promoted slave serves what the old master acknowledged. A record that does not decode
(written by a newer version, or damaged) is counted and skipped, never applied half: the
fold must not stop on one bad record, and skipping is deterministic on every replica.

The snapshot (consumerOffset.json) is `to_json()`: the table plus the `applied_queue_offset`
it covers, so a restart replays only the records after it.
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

__all__ = ["GROUPS_MAX", "OFFSETS_TOPIC", "OffsetRecord", "OffsetTable", "decode_offset_record",
           "encode_commit", "encode_delete_group"]

OFFSETS_TOPIC = "rmq_sys_rocketha_offsets"  # one queue (0) per replica set
GROUPS_MAX = 100_000  # consumer groups one replica set keeps offsets for
QUEUE_ID_MAX = 1023  # a topic has at most 1024 queues (ha/broker/metadata.py)

Offsets = dict[str, dict[str, dict[str, int]]]  # group -> topic -> str(queue_id) -> offset


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetRecord:
    """One decoded record: `op` is "commit" (every field set) or "delete_group"."""

    op: str
    group: str
    topic: str = ""
    queue_id: int = -1
    queue_offset: int = -1


def encode_commit(group: str, topic: str, queue_id: int, queue_offset: int) -> bytes:
    return encode_envelope("commit", {"group": group, "topic": topic, "queue_id": queue_id,
                                      "queue_offset": queue_offset})


def encode_delete_group(group: str) -> bytes:
    return encode_envelope("delete_group", {"group": group})


def decode_offset_record(body: bytes) -> OffsetRecord:
    """The record in `body`; ValueError (naming what is wrong) for anything else."""
    op, raw = decode_envelope(body, "offset")
    group = raw.get("group")
    if not isinstance(group, str) or topic_name_error(group) is not None:
        raise ValueError(f"bad group {group!r:.60}")
    if op == "delete_group":
        return OffsetRecord("delete_group", group)
    if op != "commit":
        raise ValueError(f"unknown op {op!r:.40}")
    topic, queue_id, queue_offset = raw.get("topic"), raw.get("queue_id"), raw.get("queue_offset")
    if not isinstance(topic, str) or topic_name_error(topic) is not None:
        raise ValueError(f"bad topic {topic!r:.60}")
    if not int_in(queue_id, 0, QUEUE_ID_MAX) or not int_in(queue_offset, 0, QUEUE_OFFSET_MAX):
        raise ValueError(f"bad queue_id {queue_id!r:.20} or queue_offset {queue_offset!r:.20}")
    return OffsetRecord("commit", group, topic, queue_id, queue_offset)


class OffsetTable(FoldPosition):
    """The offsets after the records [0, applied_queue_offset) of OFFSETS_TOPIC (not
    thread-safe: ha/broker/offset_log.py serializes every call)."""

    def __init__(self, offsets: Offsets | None = None, applied_queue_offset: int = 0) -> None:
        super().__init__(applied_queue_offset)
        self.offsets: Offsets = offsets if offsets is not None else {}

    def apply(self, queue_offset: int, body: bytes) -> OffsetRecord | None:
        """Apply the record at `queue_offset`, which must be the next one. Returns it, or None
        when it was skipped (undecodable, or a new group past GROUPS_MAX)."""
        record = self._advance(queue_offset, body, decode_offset_record)
        if record is None:
            return None
        if record.op == "delete_group":
            self.offsets.pop(record.group, None)
            return record
        if record.group not in self.offsets and len(self.offsets) >= GROUPS_MAX:
            self.records_skipped += 1  # the broker refuses such a commit before writing it
            return None
        topics = self.offsets.setdefault(record.group, {})
        topics.setdefault(record.topic, {})[str(record.queue_id)] = record.queue_offset
        return record

    def query(self, group: str, topic: str) -> dict[str, int]:
        return dict(self.offsets.get(group, {}).get(topic, {}))

    def copy_offsets(self) -> Offsets:
        return {group: {topic: dict(queues) for topic, queues in topics.items()}
                for group, topics in self.offsets.items()}

    def to_json(self) -> dict[str, Any]:
        return {"offsets": self.offsets, "applied_queue_offset": self.applied_queue_offset}

    @classmethod
    def from_json(cls, raw: Any) -> OffsetTable:
        """A snapshot written by `to_json` (or a consumerOffset.json from before offset records,
        without `applied_queue_offset`: the records are then replayed from 0 on top of it).
        TypeError/ValueError on a malformed one."""
        if not isinstance(raw, dict):
            raise TypeError("an offset snapshot is a JSON object")
        offsets = raw.get("offsets", {})
        applied = raw.get("applied_queue_offset", 0)
        if not int_in(applied, 0, QUEUE_OFFSET_MAX):
            raise ValueError(f"applied_queue_offset {applied!r:.20}")
        if not isinstance(offsets, dict) or len(offsets) > GROUPS_MAX or not all(
                isinstance(topics, dict) and all(isinstance(queues, dict) and all(
                    int_in(value, 0, QUEUE_OFFSET_MAX) for value in queues.values())
                    for queues in topics.values()) for topics in offsets.values()):
            raise TypeError("consumer offsets must map group -> topic -> queue -> int")
        return cls(offsets, applied)

"""The connector's offsets: one canonical JSON form, compared by Spark as a string.

Layout (what Spark stores in the checkpoint's offsets/N file and shows in progress reports):

    {"<topic>": {"<brokerName>:<queueId>": <next_queue_offset>, ...}, ...}

Topics sorted, queue keys sorted (as strings), values plain ints: the *next* queue offset to
read, so a range is [start, end). Spark compares offsets as JSON strings, so two equal offsets
in different key order would look different and make it plan empty micro-batches forever; every
offset the connector hands to Spark goes through `canonical()`.

In user-given JSON (startingOffsets / endingOffsets) -2 means earliest and -1 latest, as in
Spark's Kafka source; startingOffsetsByTimestamp uses the same layout with epoch milliseconds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from connector.errors import OptionError

__all__ = [
    "EARLIEST",
    "LATEST",
    "QueueRef",
    "TopicOffsets",
    "canonical",
    "flatten",
    "parse_offsets_json",
    "parse_queue_key",
    "queue_key",
    "unflatten",
]

EARLIEST = -2
LATEST = -1

TopicOffsets = dict[str, dict[str, int]]  # topic -> queue key -> queue offset


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class QueueRef:
    """One queue of one topic on one replica set."""

    topic: str
    broker_name: str
    queue_id: int

    @property
    def key(self) -> str:
        return queue_key(self.broker_name, self.queue_id)


def queue_key(broker_name: str, queue_id: int) -> str:
    return f"{broker_name}:{queue_id}"


def parse_queue_key(key: str, what: str) -> tuple[str, int]:
    broker_name, sep, queue_text = key.rpartition(":")
    if not sep or not broker_name or not queue_text.isdigit():
        raise OptionError(f"{what}: queue key {key!r} must be '<brokerName>:<queueId>'")
    return broker_name, int(queue_text)


def canonical(offsets: Mapping[str, Mapping[str, int]]) -> TopicOffsets:
    """The same offsets with sorted topics and queue keys and int values (a new dict)."""
    return {topic: {key: int(offsets[topic][key]) for key in sorted(offsets[topic])}
            for topic in sorted(offsets)}


def flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[QueueRef, int]:
    result: dict[QueueRef, int] = {}
    for topic, queues in offsets.items():
        for key, value in queues.items():
            broker_name, queue_id = parse_queue_key(key, "offsets")
            result[QueueRef(topic, broker_name, queue_id)] = int(value)
    return result


def unflatten(offsets: Mapping[QueueRef, int]) -> TopicOffsets:
    nested: dict[str, dict[str, int]] = {}
    for ref, value in offsets.items():
        nested.setdefault(ref.topic, {})[ref.key] = value
    return canonical(nested)


def parse_offsets_json(text: str, option: str, *, low: int) -> TopicOffsets:
    """Parse user JSON of the canonical layout; every value an int >= `low`."""
    try:
        value: Any = json.loads(text)
    except ValueError as err:
        raise OptionError(f"option {option}: not valid JSON ({err}): {text[:200]!r}") from err
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option {option}: expected a non-empty JSON object "
                          f'{{"<topic>": {{"<brokerName>:<queueId>": n}}}}, got {text[:200]!r}')
    for topic, queues in value.items():
        if not isinstance(queues, dict) or not queues:
            raise OptionError(f"option {option}: topic {topic!r} must map to a non-empty object "
                              f"of '<brokerName>:<queueId>' -> number")
        for key, number in queues.items():
            parse_queue_key(key, f"option {option}")
            if isinstance(number, bool) or not isinstance(number, int) or number < low:
                raise OptionError(f"option {option}: {topic}/{key} must be an integer >= {low}, "
                                  f"got {number!r}")
    return canonical(value)

"""Broker metadata that must survive restarts: topic configs.

They live as JSON in `<storePathRootDir>/config/topics.json` (RocketMQ's file), replaced
atomically on every change (temp + fsync + rename), so a crash leaves the old or the new file,
never a torn one. Consumer-group offsets are records in the CommitLog (ha/broker/offset_log.py),
with consumerOffset.json as their snapshot.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from pathlib import Path
from typing import Any

from storage_engine import atomic_write_bytes, check_topic_name

__all__ = ["PERM_READ", "PERM_WRITE", "TopicConfig", "TopicTable"]

logger = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
QUEUE_NUMS_MAX = 1024
TOPICS_MAX = 100_000


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicTable:
    """Topic name → TopicConfig, persisted in config/topics.json."""

    def __init__(self, config_dir: Path) -> None:
        self._path = config_dir / "topics.json"
        config_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        if self._path.exists():
            raw = json.loads(self._path.read_text())
            for item in raw.get("topics", []):
                self._topics[item["name"]] = TopicConfig(**item)

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda topic: topic.name)

    def put(self, topic: TopicConfig) -> TopicConfig:
        with self._lock:
            self._topics[topic.name] = topic
            self._save()
        return topic

    def delete(self, name: str) -> bool:
        with self._lock:
            found = self._topics.pop(name, None) is not None
            if found:
                self._save()
        return found

    def replace_all(self, topics: list[dict[str, Any]]) -> None:
        """Take the master's table (a slave); raises TypeError/KeyError/ValueError on a
        malformed one (a bad name, a count out of range), leaving the current table."""
        if not isinstance(topics, list) or len(topics) > TOPICS_MAX:
            raise TypeError(f"topics must be a list of at most {TOPICS_MAX}")
        table = {}
        for item in topics:
            topic = TopicConfig(**item)
            check_topic_name(topic.name)
            for count in (topic.read_queue_nums, topic.write_queue_nums):
                if isinstance(count, bool) or not isinstance(count, int) or \
                        not 1 <= count <= QUEUE_NUMS_MAX:
                    raise ValueError(f"topic {topic.name}: queue count {count!r:.20}")
            if isinstance(topic.perm, bool) or not isinstance(topic.perm, int) or \
                    not 0 <= topic.perm <= 7:
                raise ValueError(f"topic {topic.name}: perm {topic.perm!r:.20}")
            table[topic.name] = topic
        with self._lock:
            if table != self._topics:
                self._topics = table
                self._save()

    def _save(self) -> None:
        payload = {"topics": [topic.to_json() for topic in self.all()]}
        atomic_write_bytes(self._path, json.dumps(payload, indent=1).encode())

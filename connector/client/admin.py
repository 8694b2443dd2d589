"""Admin: topics, offsets, consumer groups and broker info, as DoAction JSON calls to a
broker (with the routes and retry policy of connector/client/broker_calls.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyarrow import flight

from conf.signing import action_target
from connector.client.broker_calls import _Base
from connector.client.connections import _connection

__all__ = ["Admin"]


class Admin(_Base):
    """Topics, offsets, groups and broker info (DoAction)."""

    def action(self, kind: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(dict(body or {})).encode()

        def call(endpoint: str) -> dict[str, Any]:
            results = list(_connection(endpoint, self.config.tls).do_action(
                flight.Action(kind, payload),
                self._options("DO_ACTION", action_target(kind, payload))))
            return json.loads(results[0].body.to_pybytes())

        return self._retry(call, f"action {kind}")

    def create_topic(self, topic: str, *, queues: int | None = None,
                     read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None, table: str | None = None) -> dict[str, Any]:
        """`table`: "delta" (materialize it as a Delta table), "none", or "" (the broker's
        topicTableDefault); None leaves it as it is."""
        body: dict[str, Any] = {"topic": topic}
        for name, value in (("read_queue_nums", read_queue_nums or queues),
                            ("write_queue_nums", write_queue_nums or queues), ("perm", perm),
                            ("table", table)):
            if value is not None:
                body[name] = value
        return self.action("create_topic", body)["topic"]

    def update_topic(self, topic: str, **fields: int | str) -> dict[str, Any]:
        return self.action("update_topic", {"topic": topic, **fields})["topic"]

    def delete_topic(self, topic: str) -> bool:
        return bool(self.action("delete_topic", {"topic": topic})["deleted"])

    def delete_topic_table(self, topic: str) -> dict[str, bool]:
        """Delete `topic` if this replica set still has it, and its table under the tier
        (kept by a plain delete_topic): `{"deleted": ..., "table_deleted": ...}`."""
        reply = self.action("delete_topic", {"topic": topic, "delete_table": True})
        return {"deleted": bool(reply["deleted"]), "table_deleted": bool(reply["table_deleted"])}

    def list_topics(self) -> list[dict[str, Any]]:
        return self.action("list_topics")["topics"]

    def get_topic(self, topic: str) -> dict[str, Any]:
        return self.action("get_topic", {"topic": topic})["topic"]

    def queue_offsets(self, topic: str) -> list[dict[str, int]]:
        return self.action("queue_offsets", {"topic": topic})["queues"]

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.action("offset_for_timestamp", {
            "topic": topic, "queue_id": queue_id, "timestamp_ms": timestamp_ms})["queue_offset"]

    def commit_offset(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self.action("commit_offset", {"group": group, "topic": topic, "queue_id": queue_id,
                                      "queue_offset": queue_offset})

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        offsets = self.action("query_offsets", {"group": group, "topic": topic})["offsets"]
        return {int(queue_id): value for queue_id, value in offsets.items()}

    def broker_info(self) -> dict[str, Any]:
        return self.action("broker_info")

    def broker_stats(self) -> dict[str, Any]:
        return self.action("broker_stats")

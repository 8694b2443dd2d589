"""Consumer-group offsets kept in the replica set's CommitLog, so a failover never loses one.

Why (issue 18, chaos finding 1): a commit used to be answered once it was in the master's
consumerOffset.json; slaves got the file with the topics at most every haMetadataSyncInterval,
so a slave elected before the next sync served older offsets, and a cut-off master kept
accepting commits that the new master never saw (seed 7: 55 regressions in one partition).
Now an offset commit is a record of OFFSETS_TOPIC (Kafka's __consumer_offsets), written and
replayed by the system log machinery (ha/broker/system_log.py: answered only on PUT_OK, applied
by every replica below its confirm position and by a take-over up to the log end), folded by
the pure OffsetTable (ha/broker/offset_table.py). consumerOffset.json is the snapshot, written
every flushConsumerOffsetInterval when it changed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ha.broker.offset_table import (
    GROUPS_MAX,
    OFFSETS_TOPIC,
    OffsetTable,
    encode_commit,
    encode_delete_group,
)
from ha.broker.system_log import SystemLog, SystemLogLimitError
from storage_engine import MessageBatch, MessageStore, PutResult

__all__ = ["OFFSETS_TOPIC", "OffsetLimitError", "OffsetLog"]

SNAPSHOT_FILE = "consumerOffset.json"

OffsetLimitError = SystemLogLimitError  # the name the broker service has always caught


class OffsetLog(SystemLog[OffsetTable]):
    """The consumer-group offsets of one broker (see the module docstring)."""

    def __init__(self, config_dir: Path, store: MessageStore, *, flush_interval_ms: int,
                 put: Callable[[MessageBatch], PutResult], write_timeout_ms: int) -> None:
        super().__init__(kind="offset", topic=OFFSETS_TOPIC,
                         snapshot_path=config_dir / SNAPSHOT_FILE, store=store, put=put,
                         flush_interval_ms=flush_interval_ms,
                         write_timeout_ms=write_timeout_ms, load=OffsetTable.from_json,
                         empty=OffsetTable)

    # -- writes (master) --------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, queue_offset: int) -> PutResult:
        """Write and apply one commit; PUT_OK means it survives any failover the put rules
        cover. Raises OffsetLimitError before writing, or what the put raises (NOT_MASTER)."""
        if self._read(lambda table: group not in table.offsets
                      and len(table.offsets) >= GROUPS_MAX):
            raise OffsetLimitError(f"more than {GROUPS_MAX} consumer groups")
        result = self._write(encode_commit(group, topic, queue_id, queue_offset))
        assert result is not None
        return result

    def delete_group(self, group: str) -> PutResult | None:
        """Write and apply a delete of `group`'s offsets (None: the group has none)."""
        return self._write(encode_delete_group(group),
                           needed=lambda table: group in table.offsets)

    # -- HA metadata ------------------------------------------------------------------------
    def metadata_json(self) -> dict[str, Any]:
        """What a master ships to its slaves (only used by a slave missing records that
        retention removed)."""
        return self._read(lambda table: {
            "offsets": table.copy_offsets(),
            "offsets_applied_queue_offset": table.applied_queue_offset})

    def note_master_snapshot(self, decoded: dict[str, Any]) -> None:
        """A slave: keep the master's offsets (TypeError/ValueError: malformed)."""
        self._note_master_snapshot(OffsetTable.from_json({
            "offsets": decoded.get("offsets", {}),
            "applied_queue_offset": decoded.get("offsets_applied_queue_offset", 0)}))

    # -- reads ------------------------------------------------------------------------------
    def query(self, group: str, topic: str) -> dict[str, int]:
        self.catch_up(wait=False)
        return self._read(lambda table: table.query(group, topic))

    def snapshot(self) -> dict[str, dict[str, dict[str, int]]]:
        self.catch_up(wait=False)
        return self._read(lambda table: table.copy_offsets())

    def groups(self) -> list[str]:
        return self._read(lambda table: sorted(table.offsets))

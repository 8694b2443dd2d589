"""Topic tables, the IO of one topic: read the planned queue ranges, commit them to Delta.

    pass (TopicTableWriter.run_pass, on the `topic-tables` thread, master only)
      load the table's newest snapshot S (version v)       -> None: the table does not exist
      read the fence and each queue's txn version from S
      plan_commit (ha/broker/table_plan.py)                -> Fenced / Ahead / nothing /
                                                            CommitPlan
      read each take through the store's read path         (only confirmed messages: the
        (get_message_block; the tier serves cold ranges),   store never reads past the confirm
        checking the queue offsets are the planned ones     position), at most
                                                            topicTableCommitBytesMax in all
      write_deltalake on S: Parquet (zstd) under            data files: invisible until the
        storeDate=YYYY-MM-DD/, then _delta_log/<v+1>.json   log entry exists
        created only if absent (max_commit_retries=0: no
        rebase), with the fence and the queues' txns
      CommitFailedError                                    -> another writer took v+1: the
                                                            caller re-reads and plans again

A crash (or SIGKILL) anywhere before the log entry leaves unreferenced data files only (vacuum
removes them); after it, the commit is whole and the txns say what it holds. So the table
holds each confirmed message at most once, and the next master continues from the txns.
Table layout and the reasons for it: docs/topic-tables.md.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from ha.broker.arrow_codec import block_to_batch
from ha.broker.table_continuity import Continuity
from ha.broker.table_crash import crash_after_data_files_if_asked
from ha.broker.table_plan import (
    Ahead,
    CommitPlan,
    Fenced,
    QueueState,
    fence_app_id,
    plan_commit,
    queue_app_id,
    transactions,
)
from ha.broker.table_removal import TABLES_PREFIX
from storage_engine import GetStatus, MessageStore, StoreConfig
from storage_engine.tiered import resolve_tier_url

__all__ = ["PARTITION_COLUMN", "TABLE_SCHEMA", "CommitFailedError", "PassResult", "TableLimits",
           "TopicTableWriter", "table_storage_options", "table_uri", "tier_table_uri",
           "to_table_rows"]

PARTITION_COLUMN = "storeDate"
ZSTD_LEVEL = 3  # Parquet zstd level: ~ snappy's speed, clearly smaller files
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")  # what Spark and Delta call TIMESTAMP
TABLE_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("brokerName", pa.string()),
    pa.field("queueId", pa.int32()),
    pa.field("queueOffset", pa.int64()),
    pa.field("msgId", pa.string()),
    pa.field("key", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("body", pa.binary()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("bornTimestamp", TIMESTAMP_TYPE),
    pa.field("storeTimestamp", TIMESTAMP_TYPE),
    pa.field(PARTITION_COLUMN, pa.date32()),
])
_READ_COLUMNS = ("topic", "queue_id", "queue_offset", "msg_id", "key", "tags", "body",
                 "properties", "born_timestamp", "store_timestamp")


def table_uri(tier_url: str, topic: str) -> str:
    """`<tier URL>/tables/<topic>` (the name percent-quoted: topic names may hold `%`, `|`);
    a file:// table is given to delta-rs as a plain path."""
    uri = f"{tier_url.rstrip('/')}/{TABLES_PREFIX}/{urllib.parse.quote(topic, safe='-_')}"
    if uri.startswith("file://"):
        return str(Path(uri.removeprefix("file://")))
    if uri.startswith("s3a://"):
        return "s3://" + uri.removeprefix("s3a://")
    return uri


def table_storage_options(store_config: StoreConfig) -> dict[str, str] | None:
    """delta-rs storage options from the tier's keys (S3 endpoint, region, credentials; empty
    ones left to the AWS environment). Commits need an atomic put-if-absent: S3's conditional
    put (`If-None-Match`), never an unsafe rename."""
    config = store_config.tiered
    if not config.url.startswith(("s3://", "s3a://")):
        return None
    options = {"conditional_put": "etag"}
    if config.s3_endpoint_url:
        options["AWS_ENDPOINT_URL"] = config.s3_endpoint_url
        if config.s3_endpoint_url.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if config.s3_region:
        options["AWS_REGION"] = config.s3_region
    if config.s3_access_key_id:
        options["AWS_ACCESS_KEY_ID"] = config.s3_access_key_id
        options["AWS_SECRET_ACCESS_KEY"] = config.s3_secret_access_key
    return options


def tier_table_uri(store_config: StoreConfig, store_dir: Path, topic: str) -> str:
    """The table of `topic` under this broker's tier URL (tieredStoreUrl, or its default)."""
    return table_uri(resolve_tier_url(store_config.tiered, store_dir), topic)


def to_table_rows(batch: pa.RecordBatch, broker_name: str) -> pa.Table:
    """Consume-schema rows (the wire's names) as TABLE_SCHEMA rows."""
    store_ms = batch.column("store_timestamp")
    columns = {
        "topic": batch.column("topic"),
        "brokerName": pa.repeat(pa.scalar(broker_name, pa.string()), batch.num_rows),
        "queueId": batch.column("queue_id"),
        "queueOffset": batch.column("queue_offset"),
        "msgId": batch.column("msg_id"),
        "key": batch.column("key"),
        "tags": batch.column("tags"),
        "body": batch.column("body"),
        "properties": batch.column("properties"),
        "bornTimestamp": batch.column("born_timestamp").cast(TIMESTAMP_TYPE),
        "storeTimestamp": store_ms.cast(TIMESTAMP_TYPE),
        PARTITION_COLUMN: store_ms.cast(pa.date32()),
    }
    return pa.table([columns[field.name].cast(field.type) for field in TABLE_SCHEMA],
                    schema=TABLE_SCHEMA)


@dataclasses.dataclass(frozen=True, slots=True)
class TableLimits:
    rows_max: int  # topicTableCommitRowsMax
    bytes_max: int  # topicTableCommitBytesMax (record bytes read into one commit)


@dataclasses.dataclass(frozen=True, slots=True)
class PassResult:
    """What one pass of one topic did."""

    outcome: str  # "committed", "idle" (nothing to commit), "fenced", "ahead"
    rows: int = 0
    table_version: int | None = None
    pending_count: int = 0  # confirmed messages not in the table after this pass
    more: bool = False  # a limit ended the commit: run the next pass at once
    skipped_count: int = 0  # offsets gone from the store before the table got them
    ahead: tuple[int, ...] = ()  # queues the table is past the store's end in (no commit)
    table_epoch: int | None = None  # fenced: the epoch of the newer master
    # per queue, the next offset not in the table after this pass (queues it has rows of)
    ends: dict[int, int] = dataclasses.field(default_factory=dict)


class TopicTableWriter:
    """One topic's table (one replica set's part of it). Not thread-safe: one caller."""

    def __init__(self, store: MessageStore, *, topic: str, broker_name: str, uri: str,
                 storage_options: dict[str, str] | None, limits: TableLimits) -> None:
        self.store = store
        self.topic = topic
        self.broker_name = broker_name
        self.uri = uri
        self.storage_options = storage_options
        self.limits = limits
        self.continuity = Continuity(store, topic, broker_name)  # table_continuity.py

    def load(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def queue_states(self, table: DeltaTable | None, queue_ids: Iterable[int]
                     ) -> list[QueueState]:
        states = []
        for queue_id in sorted(set(queue_ids)):
            held = None if table is None else table.transaction_version(
                queue_app_id(self.broker_name, queue_id))
            states.append(QueueState(queue_id, held,
                                     self.store.min_queue_offset(self.topic, queue_id),
                                     self.store.max_queue_offset(self.topic, queue_id)))
        return states

    def run_pass(self, master_epoch: int, queue_ids: Iterable[int]) -> PassResult:
        """Plan, read and commit once (see the module doc). Raises CommitFailedError when
        another writer committed first, or what the store or the object store raise."""
        table = self.load()
        fence = None if table is None else table.transaction_version(
            fence_app_id(self.broker_name))
        states = self.queue_states(table, queue_ids)
        ends = {state.queue_id: state.table_next_offset for state in states
                if state.table_next_offset is not None}
        plan = plan_commit(master_epoch=master_epoch, table_fence=fence, queues=states,
                           rows_max=self.limits.rows_max)
        if plan is None:
            return PassResult("idle", ends=ends)
        if isinstance(plan, Fenced):
            return PassResult("fenced", table_epoch=plan.table_epoch)
        if isinstance(plan, Ahead):
            return PassResult("ahead", ahead=plan.queue_ids, ends=ends)
        foreign = self.continuity.foreign(table, {
            take.queue_id: take.start_offset for take in plan.takes
            if not take.skipped_count and ends.get(take.queue_id, 0) > 0})
        if foreign:  # a topic created again whose queues passed the old table's ends
            return PassResult("ahead", ahead=foreign, ends=ends)
        rows, counts = self._read(plan)
        version = self._commit(table, rows, plan, counts)
        self.continuity.remember(rows)
        for take in plan.takes:  # as transactions() moves each queue's end
            if counts.get(take.queue_id, 0) or take.skipped_count:
                ends[take.queue_id] = take.start_offset + counts.get(take.queue_id, 0)
        skipped = sum(take.skipped_count for take in plan.takes)
        left = plan.pending_count - rows.num_rows
        return PassResult("committed", rows.num_rows, version, left,
                          more=rows.num_rows > 0 and left > 0, skipped_count=skipped,
                          ends=ends)

    def _read(self, plan: CommitPlan) -> tuple[pa.Table, dict[int, int]]:
        """The planned rows, read through the store; each take's byte budget is its share of
        bytes_max by planned rows. Returns the rows and the rows read per queue (a prefix of
        each take: a budget or a read that finds less ends it)."""
        parts: list[pa.Table] = []
        counts: dict[int, int] = {}
        planned = max(1, plan.rows_planned)
        for take in plan.takes:
            offset = take.start_offset
            bytes_left = max(1, self.limits.bytes_max * take.count // planned)
            while offset < take.end_offset and bytes_left > 0:
                block = self.store.get_message_block(self.topic, take.queue_id, offset,
                                                     max_count=take.end_offset - offset,
                                                     max_bytes=bytes_left)
                if block.status is not GetStatus.FOUND or len(block.sizes) == 0:
                    break
                batch = block_to_batch(block.data, block.sizes, self.topic, _READ_COLUMNS)
                offsets = batch.column("queue_offset").to_numpy()
                count = min(len(offsets), take.end_offset - offset)
                expected = np.arange(offset, offset + count, dtype=np.int64)
                assert np.array_equal(offsets[:count], expected), (
                    f"{self.topic}/{take.queue_id}: read offsets from {offset} are not "
                    "contiguous")
                parts.append(to_table_rows(batch.slice(0, count), self.broker_name))
                offset += count
                bytes_left -= len(block.data)
            counts[take.queue_id] = offset - take.start_offset
        rows = pa.concat_tables(parts) if parts else TABLE_SCHEMA.empty_table()
        return rows, counts

    def _commit(self, table: DeltaTable | None, rows: pa.Table, plan: CommitPlan,
                counts: dict[int, int]) -> int:
        """Commit `rows` with the plan's txns on exactly `table`'s snapshot (create the table
        when None: `mode="error"` fails if another writer created it meanwhile)."""
        txns = transactions(plan, self.broker_name, counts)
        queues = {str(take.queue_id): take.start_offset + counts.get(take.queue_id, 0)
                  for take in plan.takes}
        properties = CommitProperties(
            app_transactions=[Transaction(app_id, version) for app_id, version in txns],
            custom_metadata={"rocketha.brokerName": self.broker_name,
                             "rocketha.masterEpoch": str(plan.master_epoch),
                             "rocketha.sequence": str(plan.sequence),
                             "rocketha.queueNextOffsets": json.dumps(queues)},
            max_commit_retries=0)  # no rebase: the plan holds only on this snapshot
        writer = WriterProperties(compression="ZSTD", compression_level=ZSTD_LEVEL)
        if table is None:
            write_deltalake(self.uri, rows, mode="error", partition_by=[PARTITION_COLUMN],
                            name=self.topic, storage_options=self.storage_options,
                            writer_properties=writer, commit_properties=properties)
            return 0
        version_read = table.version()
        crash_after_data_files_if_asked(self.uri, rows, PARTITION_COLUMN, ZSTD_LEVEL)  # tests
        write_deltalake(table, rows, mode="append", partition_by=[PARTITION_COLUMN],
                        writer_properties=writer, commit_properties=properties)
        assert table.version() == version_read + 1, (version_read, table.version())
        return table.version()


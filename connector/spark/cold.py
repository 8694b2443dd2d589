"""Cold reads (`readColdFromTier=true`): queue ranges in the tier, read by executors from the
objects themselves, with no broker in the path.

The tier's object format belongs to `storage_engine`, which the connector may not import
(docs/design.md §2). So the connector states what it needs, a `ColdReader`, and the composition root
passes the implementation in: `pyspark_rocketha.DefaultSource` (the class Spark registers as
"rocketha") carries `rocketha_cold.TierObjectReader`, built on `storage_engine.tiered`; the
data source hands it to its readers, which Spark pickles to the executors with it. A reader
built without one (the bare `connector.spark.datasource.RocketHADataSource`) refuses
readColdFromTier with an error naming the option.

    planning (driver)                                  reading (executor)
    [start, end) of a queue                            ColdRangePartition
      ├─ reader.plan(...) -> pieces the tier holds  ─►   reader.read(piece) -> consume batches
      │     (a prefix: tiered segments are the oldest)    -> tagFilter -> source schema
      └─ the rest -> QueueRangePartition (broker)

Rows are the broker path's rows: the tier holds sealed segments below the confirm position,
the same records in the same order; the sink's idempotence markers are stripped by the same
`to_source_batch`, which also builds only the columns the query declared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from connector.client import Admin
from connector.client.routes import ReplicaSet, client_config
from connector.errors import OptionError
from connector.protocol import CONSUME_SCHEMA
from connector.spark.options import READ_COLD_FROM_TIER, SourceOptions
from connector.spark.partitions import ColdRangePartition
from connector.spark.planning import QueueRange
from connector.spark.source import SourceColumns, consume_columns, to_source_batch

__all__ = [
    "ColdPiece",
    "ColdReader",
    "TierLocation",
    "cold_columns",
    "read_cold",
    "require_cold_reader",
    "split_cold",
]


@dataclasses.dataclass(frozen=True, slots=True)
class TierLocation:
    """Where a replica set's tier is and how to open it (plain values: pickled to executors)."""

    url: str
    storage_options: tuple[tuple[str, str], ...] = dataclasses.field(default=(),
                                                                      repr=False)  # secret


@dataclasses.dataclass(frozen=True, slots=True)
class ColdPiece:
    """Queue offsets [start, end) that one tier object holds; `plan` is the reader's own."""

    start_queue_offset: int
    end_queue_offset: int
    plan: object


class ColdReader(Protocol):
    def plan(self, location: TierLocation, broker_name: str, topic: str, queue_id: int,
             start_queue_offset: int, end_queue_offset: int) -> Sequence[ColdPiece]:
        """The tier's part of [start, end) as pieces in queue order (may be empty)."""
        ...

    def read(self, location: TierLocation, piece: ColdPiece,
             columns: tuple[str, ...] | None = None) -> Iterator[pa.RecordBatch]:
        """The piece's messages, in order, as batches of the broker's consume schema cut to
        `columns` (None: every column), as a broker builds them for a ticket's columns."""
        ...


def require_cold_reader(reader: ColdReader | None) -> ColdReader:
    """`reader`, or an OptionError naming readColdFromTier when the data source has none."""
    if reader is None:
        raise OptionError(f"option {READ_COLD_FROM_TIER}: this data source has no tier reader "
                          "(use format(\"rocketha\"), which Spark finds through the "
                          "pyspark_rocketha module the rocketha package installs, on the "
                          "driver and the executors)")
    return reader


def _location(replica_set: ReplicaSet, options: SourceOptions) -> TierLocation | None:
    info = Admin(client_config(replica_set.endpoints, options.request_timeout_ms,
                               options.tls, options.credentials)).broker_info()
    tiered = info.get("tiered") or {}
    if not tiered.get("enabled") or not tiered.get("url"):
        return None
    return TierLocation(str(tiered["url"]), options.tier_storage_options)


def split_cold(ranges: Sequence[QueueRange], replica_sets: dict[str, ReplicaSet],
               options: SourceOptions, reader: ColdReader | None
               ) -> tuple[list[ColdRangePartition], list[QueueRange]]:
    """Cold partitions for what the tiers hold, and the ranges left for the brokers."""
    reader = require_cold_reader(reader)
    locations = {name: _location(rs, options) for name, rs in sorted(replica_sets.items())
                 if any(r.ref.broker_name == name for r in ranges)}
    cold: list[ColdRangePartition] = []
    hot: list[QueueRange] = []
    for queue_range in ranges:
        ref = queue_range.ref
        location = locations.get(ref.broker_name)
        cursor, end = queue_range.start_queue_offset, queue_range.end_queue_offset
        if location is not None and cursor < end:
            pieces: list[ColdPiece] = []
            for piece in reader.plan(location, ref.broker_name, ref.topic, ref.queue_id,
                                     cursor, end):
                if piece.start_queue_offset > cursor:
                    break  # a gap: the rest comes from the broker, in order
                pieces.append(piece)
                cursor = piece.end_queue_offset
            if pieces:  # one task per queue range, as on the broker path (tasks cost ~0.1 s)
                cold.append(ColdRangePartition(
                    ref.topic, ref.broker_name, ref.queue_id, pieces[0].start_queue_offset,
                    cursor, location.url, location.storage_options, tuple(pieces)))
        if cursor < end:
            hot.append(QueueRange(ref, cursor, end))
    return cold, hot


def _tag_filter(expression: str | None) -> pa.Array | None:
    if expression is None or expression.strip() in ("", "*"):
        return None
    return pa.array(sorted({tag.strip() for tag in expression.split("||")}), pa.string())


def cold_columns(columns: SourceColumns, tag_filter: str | None) -> tuple[str, ...]:
    """The consume columns a cold read of `columns` decodes: those of a broker pull (the
    partition supplies topic, brokerName and queueId), plus `tags` when a tag filter needs
    them. A cold piece holds exactly its queue offsets, so no offset cut is needed."""
    wanted = set(consume_columns(columns, tag_filter=None))
    if _tag_filter(tag_filter) is not None:
        wanted.add("tags")
    return tuple(name for name in CONSUME_SCHEMA.names if name in wanted)


def read_cold(partition: ColdRangePartition, options: SourceOptions, columns: SourceColumns,
              reader: ColdReader | None) -> Iterator[pa.RecordBatch]:
    """The partition's messages as batches of `columns`, tagFilter applied as the broker
    does; only the columns the query declared (and the tags a filter needs) are decoded."""
    reader = require_cold_reader(reader)
    location = TierLocation(partition.tier_url, partition.tier_storage_options)
    wanted = _tag_filter(options.tag_filter)
    decode = cold_columns(columns, options.tag_filter)
    for piece in partition.pieces:
        assert isinstance(piece, ColdPiece), piece
        for batch in reader.read(location, piece, decode):
            if wanted is not None:
                batch = batch.filter(pc.is_in(batch.column("tags"), value_set=wanted))
            if batch.num_rows:
                yield to_source_batch(batch, partition.broker_name, columns,
                                      topic=partition.topic, queue_id=partition.queue_id)

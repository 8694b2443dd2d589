"""The tier reader the Spark source uses for `readColdFromTier=true`, on storage_engine.tiered.

Records are decoded by the decoder a broker uses for its consume batches
(`storage_engine.block_to_arrow` into the wire's `consume_schema(columns)`), so a cold
partition yields exactly the batches a broker would serve for the same records.

`connector.spark.cold` says what a cold reader must do without importing `storage_engine`
(docs/design.md
§2); this module, outside every package, implements it with the tier's own reader functions,
and `pyspark_rocketha` (the composition root) hands it to the data source: its `DefaultSource`
carries a `TierObjectReader`, which the Spark readers hold and pickle to the executors.
`TierObjectReader` is therefore a plain value; manifests are cached per process, per (tier URL,
replica set) for `MANIFEST_CACHE_S`, so planning a query with many queues reads each manifest
once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa

from connector.protocol import consume_schema
from connector.spark.cold import ColdPiece, TierLocation
from storage_engine import block_to_arrow
from storage_engine.tiered import (
    FileIO,
    FileIOOptions,
    Manifest,
    TierRange,
    load_manifest,
    plan_tier_ranges,
    read_tier_range,
)

__all__ = ["TierObjectReader", "file_io_for"]

MANIFEST_CACHE_S = 5.0
ROWS_PER_BATCH = 65536  # rows per Arrow batch a cold task yields
_OPTION_FIELDS = {"endpoint_url": "s3_endpoint_url", "region": "s3_region",
                  "key": "s3_access_key_id", "secret": "s3_secret_access_key",
                  "request_timeout_s": "request_timeout_s"}


def file_io_for(location: TierLocation) -> FileIO:
    """A FileIO for the tier URL; `tierStorageOptions` keys: endpoint_url, region, key, secret,
    request_timeout_s (credentials otherwise come from the usual AWS environment)."""
    fields: dict[str, object] = {}
    for key, value in location.storage_options:
        if key not in _OPTION_FIELDS:
            raise ValueError(f"tierStorageOptions: unknown key {key!r} "
                             f"(known: {sorted(_OPTION_FIELDS)})")
        fields[_OPTION_FIELDS[key]] = float(value) if key == "request_timeout_s" else value
    return FileIO(location.url, FileIOOptions(**fields))  # type: ignore[arg-type]


class _ManifestCache:
    """Manifests by (tier URL, replica set), each kept for MANIFEST_CACHE_S."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manifests: dict[tuple[str, str], tuple[float, Manifest]] = {}

    def get(self, location: TierLocation, broker_name: str) -> Manifest:
        key = (location.url, broker_name)
        with self._lock:
            cached = self._manifests.get(key)
        if cached is not None and time.monotonic() - cached[0] < MANIFEST_CACHE_S:
            return cached[1]
        manifest = load_manifest(file_io_for(location), broker_name)
        with self._lock:
            self._manifests[key] = (time.monotonic(), manifest)
        return manifest


# One per process, outside the reader: the reader is pickled with every Spark reader and task,
# and a cache (with its lock) must neither travel nor start empty on each unpickle.
_MANIFESTS = _ManifestCache()


@dataclasses.dataclass(frozen=True, slots=True)
class TierObjectReader:
    """connector.spark.cold.ColdReader over the tier's manifest and segment objects (a plain
    value: Spark pickles it to the executors inside the readers)."""

    def plan(self, location: TierLocation, broker_name: str, topic: str, queue_id: int,
             start_queue_offset: int, end_queue_offset: int) -> Sequence[ColdPiece]:
        manifest = _MANIFESTS.get(location, broker_name)
        return [ColdPiece(r.first_queue_offset, r.end_queue_offset, r)
                for r in plan_tier_ranges(manifest, topic, queue_id, start_queue_offset,
                                          end_queue_offset)]

    def read(self, location: TierLocation, piece: ColdPiece,
             columns: tuple[str, ...] | None = None) -> Iterator[pa.RecordBatch]:
        tier_range = piece.plan
        assert isinstance(tier_range, TierRange), tier_range
        schema = consume_schema(columns)
        for block in read_tier_range(file_io_for(location), tier_range,
                                     rows_per_block=ROWS_PER_BATCH):
            # the broker's own decoder: the same rows as a broker-served read, vectorized
            yield block_to_arrow(block.data, block.sizes, tier_range.topic, schema)

"""The contract between the store and its cold tier: what the store asks of tiered storage
(`ColdTier`, implemented by `storage_engine.tiered.TierReader`) and how a cold block becomes
what `get_messages` returns.

This module imports nothing from `tiered`: the tier attaches itself to a store
(`MessageStore.attach_tier`), so the store's modules depend on this protocol only.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from storage_engine.messages import GetResult, RecordBlock, TagFilter
from storage_engine.record_format import (
    BODY_LENGTH_AT,
    CRC_TAIL_SIZE_BYTES,
    HEADER_SIZE_BYTES,
    PROPERTIES_LENGTH_SIZE_BYTES,
    TOPIC_LENGTH_SIZE_BYTES,
    decode_properties,
)
from storage_engine.statuses import GetStatus

__all__ = ["ColdTier", "cold_result", "tag_matches"]


class ColdTier(Protocol):
    """What the store asks of tiered storage (storage_engine.tiered.TierReader)."""

    def holds_segment(self, base_log_position: int, log_position_end: int) -> bool: ...

    def min_queue_offset(self, topic: str, queue_id: int) -> int | None: ...

    def queue_offset_for_timestamp(self, topic: str, queue_id: int,
                                   timestamp_ms: int) -> int | None:
        """The tier's first queue_offset stored at or after `timestamp_ms`; None when the tier
        has none (the answer lies in the local store)."""

    def read_block(self, topic: str, queue_id: int, queue_offset: int, *, max_count: int,
                   max_bytes: int, confirm_log_position: int) -> RecordBlock | None:
        """FOUND with records; OFFSET_TOO_SMALL below the tier's minimum; NO_MATCHED_MESSAGE
        when nothing there is visible yet; None when the tier does not hold `queue_offset`."""


def cold_result(block: RecordBlock, tag_filter: TagFilter | None) -> GetResult:
    """A cold block as get_messages returns it (records split, tag filter applied)."""
    records, position = [], 0
    for size in np.asarray(block.sizes).tolist():
        record = block.data[position:position + size]
        position += size
        if tag_filter is None or tag_matches(record, tag_filter):
            records.append(record)
    status = block.status
    if status is GetStatus.FOUND and not records:
        status = GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, block.next_queue_offset, block.min_queue_offset,
                     block.max_queue_offset, records)


def tag_matches(record: bytes | None, tag_filter: TagFilter | None) -> bool:
    """Exact tag check after the tags_code matched (hash collisions are possible)."""
    if record is None or tag_filter is None:
        return record is not None
    body_size = int.from_bytes(record[BODY_LENGTH_AT:HEADER_SIZE_BYTES], "big")
    topic_at = HEADER_SIZE_BYTES + body_size
    props_at = (topic_at + TOPIC_LENGTH_SIZE_BYTES + record[topic_at]
                + PROPERTIES_LENGTH_SIZE_BYTES)
    try:
        tags = decode_properties(record[props_at:len(record) - CRC_TAIL_SIZE_BYTES]).get("TAGS")
    except ValueError:
        return False
    return tags in tag_filter.tags

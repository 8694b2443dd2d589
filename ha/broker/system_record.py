"""What every system-log record and fold share (pure): the JSON envelope and the position.

A record of an internal topic (ha/broker/system_log.py) is one JSON object, UTF-8, keys sorted,
with the envelope `{"v": RECORD_VERSION, "op": OP, ...fields}`; the folds
(ha/broker/offset_table.py, ha/broker/metadata.py) define the ops and fields. A body that is
not such an object is refused with ValueError, which a fold counts and skips.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["QUEUE_OFFSET_MAX", "RECORD_VERSION", "FoldPosition", "decode_envelope",
           "encode_envelope", "int_in"]

RECORD_VERSION = 1
QUEUE_OFFSET_MAX = 1 << 62

R = TypeVar("R")


def encode_envelope(op: str, fields: dict[str, Any]) -> bytes:
    return json.dumps({**fields, "v": RECORD_VERSION, "op": op}, sort_keys=True).encode()


def decode_envelope(body: bytes, kind: str) -> tuple[Any, dict[str, Any]]:
    """(op, the object) of a `kind` record; ValueError (naming what is wrong) otherwise."""
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, RecursionError) as err:
        raise ValueError(f"not JSON: {err}") from err
    if not isinstance(raw, dict) or raw.get("v") != RECORD_VERSION:
        raise ValueError(f"not a version {RECORD_VERSION} {kind} record")
    return raw.get("op"), raw


def int_in(value: Any, low: int, high: int) -> bool:
    """An int (not a bool) in [low, high]."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class FoldPosition:
    """The queue offset a fold has applied up to (the records [0, applied_queue_offset)),
    and how many of them it skipped."""

    def __init__(self, applied_queue_offset: int) -> None:
        assert applied_queue_offset >= 0, applied_queue_offset
        self.applied_queue_offset = applied_queue_offset
        self.records_skipped = 0  # did not decode, or past a table's limit

    def _advance(self, queue_offset: int, body: bytes,
                 decode: Callable[[bytes], R]) -> R | None:
        """The record at `queue_offset`, which must be the next one (out of order is a bug,
        never applied), decoded; None (counted as skipped) when it does not decode."""
        assert queue_offset == self.applied_queue_offset, (queue_offset,
                                                           self.applied_queue_offset)
        self.applied_queue_offset += 1
        try:
            return decode(body)
        except ValueError:
            self.records_skipped += 1
            return None

    def skip_to(self, queue_offset: int) -> int:
        """Move past records that can no longer be read (retention removed them before this
        replica applied them); returns how many were skipped."""
        assert queue_offset >= self.applied_queue_offset
        skipped = queue_offset - self.applied_queue_offset
        self.applied_queue_offset = queue_offset
        return skipped

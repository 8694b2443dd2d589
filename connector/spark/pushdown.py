"""Filter pushdown for batch reads: the filters the broker can answer without reading everything.

Spark 4.1 and later hands a Python source's reader the query's conjunctive filters
(`pushFilters`, only when the SQL conf `spark.sql.python.filterPushdown.enabled` is true; 4.0
has no pushdown, and Spark filters every row itself). A pushed filter is not evaluated by Spark
again, so what this module accepts must come out exact:

    queueId  = n, IN (...)          read only those queues                      (planning)
    queueOffset <, <=, >, >=, =     narrow each queue's [start, end)              (planning)
    tags     = 'A', IN ('A', 'B')   the broker's tag filter (`A || B`), ANDed with the
                                    tagFilter option; rows re-checked in read()   (broker)
    storeTimestamp <, <=, >, >=     seek each queue's start / end by time (the broker's
                                    offset_for_timestamp, as startingTimestamp does); rows
                                    re-checked in read(), so the result is exact (the seek
                                    assumes store times rise along a queue, as RocketMQ's
                                    does: a message stored out of time order before the seek
                                    point is not read)

Kafka's names of the same values (`columns=kafka`: partition, offset, timestamp) push as
queueId, queueOffset and storeTimestamp. Everything else (other columns, OR, NOT, string
matches, a tag that the tag expression cannot spell) is returned to Spark. Filters that
contradict each other make the read empty.

Store timestamps are milliseconds on the broker and microseconds in Spark, so bounds are turned
into half-open millisecond ranges [store_ms_min, store_ms_end) with the right rounding.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from connector.spark.compat import (  # pyspark's filters (4.1+), stand-ins on 4.0
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["PushedFilters", "push_filters", "row_mask"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_RANGE = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
_OPS = {GreaterThan: ">", GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=",
        EqualTo: "=", In: "IN"}


@dataclasses.dataclass(frozen=True, slots=True)
class PushedFilters:
    """What the pushed filters allow (None: no constraint). Plain values: Spark pickles the
    reader that holds this to the executors."""

    queue_ids: frozenset[int] | None = None
    tags: frozenset[str] | None = None
    queue_offset_min: int = 0  # inclusive
    queue_offset_end: int | None = None  # exclusive
    store_ms_min: int | None = None  # inclusive, epoch ms
    store_ms_end: int | None = None  # exclusive, epoch ms
    described: tuple[str, ...] = ()  # the accepted filters, for logs and tests

    @property
    def empty(self) -> bool:
        """True when the filters contradict each other: no row can match."""
        return ((self.queue_ids is not None and not self.queue_ids)
                or (self.tags is not None and not self.tags)
                or (self.queue_offset_end is not None
                    and self.queue_offset_end <= self.queue_offset_min)
                or (self.store_ms_min is not None and self.store_ms_end is not None
                    and self.store_ms_end <= self.store_ms_min))

    @property
    def by_time(self) -> bool:
        return self.store_ms_min is not None or self.store_ms_end is not None

    def tag_filter(self, option_tags: str | None) -> str | None:
        """The broker tag expression: the tagFilter option ANDed with the pushed tags."""
        if self.tags is None:
            return option_tags
        tags = self.tags
        if option_tags is not None:
            tags = tags & frozenset(part.strip() for part in option_tags.split("||"))
        assert tags, "an empty tag set is handled as an empty read"
        return " || ".join(sorted(tags))


def _tag_spellable(value: object) -> bool:
    """Whether a tag value can be written in a tag expression and match exactly."""
    return (isinstance(value, str) and value != "" and value == value.strip()
            and "||" not in value and value != "*")


def _timestamp_us(value: object) -> int | None:
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None  # naive: its time zone is the session's, which the worker cannot see
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def push_filters(filters: Sequence[Filter], columns: Iterable[str]
                 ) -> tuple[PushedFilters, list[Filter]]:
    """Split `filters` (ANDed) into what the source answers and what Spark keeps (the latter
    returned by reference, as Spark requires)."""
    known = frozenset(columns)
    pushed = PushedFilters()
    kept: list[Filter] = []
    for item in filters:
        updated = _push_one(pushed, item, known)
        if updated is None:
            kept.append(item)
        else:
            name = ".".join(item.attribute)  # type: ignore[attr-defined]
            pushed = dataclasses.replace(updated, described=(
                *pushed.described,
                f"{name} {_OPS[type(item)]} {item.value!r}"))  # type: ignore[attr-defined]
    return pushed, kept


def _push_one(pushed: PushedFilters, item: Filter, known: frozenset[str]
              ) -> PushedFilters | None:
    attribute = getattr(item, "attribute", ())
    if len(attribute) != 1 or attribute[0] not in known or type(item) not in _OPS:
        return None
    column, value = attribute[0], item.value  # type: ignore[attr-defined]
    column = _OURS.get(column, column)  # Kafka's name of the same values (columns=kafka)
    if column == "queueId":
        return _push_set(pushed, "queue_ids", item, value, _int)
    if column == "tags":
        return _push_set(pushed, "tags", item, value,
                         lambda v: v if _tag_spellable(v) else None)
    if column == "queueOffset":
        return _push_queue_offset(pushed, item, value)
    if column == "storeTimestamp" and isinstance(item, _RANGE):
        return _push_time(pushed, item, value)
    return None


# the Kafka names whose filters push as ours: the same values (connector/spark/columns.py)
_OURS = {"partition": "queueId", "offset": "queueOffset", "timestamp": "storeTimestamp"}
_TIME_COLUMNS = ("storeTimestamp", "timestamp")


def _push_set(pushed: PushedFilters, field: str, item: Filter, value: object,
              convert) -> PushedFilters | None:  # type: ignore[no-untyped-def]
    if isinstance(item, EqualTo):
        values = (value,)
    elif isinstance(item, In):
        values = tuple(value)  # type: ignore[arg-type]
    else:
        return None
    converted = [convert(v) for v in values]
    if any(v is None for v in converted):
        return None
    allowed = frozenset(converted)
    current = getattr(pushed, field)
    return dataclasses.replace(pushed, **{field: allowed if current is None
                                          else current & allowed})


def _push_queue_offset(pushed: PushedFilters, item: Filter, value: object
                       ) -> PushedFilters | None:
    number = _int(value)
    if number is None or isinstance(item, In):
        return None
    low, end = pushed.queue_offset_min, pushed.queue_offset_end
    if isinstance(item, (GreaterThan, GreaterThanOrEqual, EqualTo)):
        low = max(low, number + 1 if isinstance(item, GreaterThan) else number)
    if isinstance(item, (LessThan, LessThanOrEqual, EqualTo)):
        bound = number if isinstance(item, LessThan) else number + 1
        end = bound if end is None else min(end, bound)
    return dataclasses.replace(pushed, queue_offset_min=max(0, low), queue_offset_end=end)


def _push_time(pushed: PushedFilters, item: Filter, value: object) -> PushedFilters | None:
    micros = _timestamp_us(value)
    if micros is None:
        return None
    low, end = pushed.store_ms_min, pushed.store_ms_end
    if isinstance(item, GreaterThanOrEqual):  # ms * 1000 >= us
        low = max(low or 0, _ceil_div(micros, 1000))
    elif isinstance(item, GreaterThan):  # ms * 1000 > us
        low = max(low or 0, micros // 1000 + 1)
    elif isinstance(item, LessThan):  # ms * 1000 < us
        bound = _ceil_div(micros, 1000)
        end = bound if end is None else min(end, bound)
    else:  # LessThanOrEqual: ms * 1000 <= us
        bound = micros // 1000 + 1
        end = bound if end is None else min(end, bound)
    return dataclasses.replace(pushed, store_ms_min=low, store_ms_end=end)


def row_mask(batch: pa.RecordBatch, pushed: PushedFilters) -> pa.Array | None:
    """The rows of a source batch that pass the pushed tag and time filters (None: all do).
    The broker already applied them (tag filter, seek); this makes the result exact."""
    masks = []
    if pushed.tags is not None and "tags" in batch.schema.names:
        masks.append(pc.is_in(batch.column("tags"), value_set=pa.array(sorted(pushed.tags))))
    time_column = next((name for name in _TIME_COLUMNS if name in batch.schema.names), None)
    if pushed.by_time and time_column is not None:
        stamps = batch.column(time_column)
        if pushed.store_ms_min is not None:
            masks.append(pc.greater_equal(stamps, pa.scalar(
                pushed.store_ms_min * 1000, stamps.type)))
        if pushed.store_ms_end is not None:
            masks.append(pc.less(stamps, pa.scalar(pushed.store_ms_end * 1000, stamps.type)))
    if not masks:
        return None
    mask = masks[0]
    for other in masks[1:]:
        mask = pc.and_(mask, other)
    return pc.fill_null(mask, False)

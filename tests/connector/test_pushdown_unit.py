"""Which filters the source takes (connector.spark.pushdown), with no Spark session and no broker.

Goal: the source accepts exactly the filters it answers exactly (queueId/tags =/IN, queueOffset
and storeTimestamp ranges), returns the others by reference, intersects repeated constraints,
rounds microsecond bounds to the broker's milliseconds without losing or adding a row, and
spots contradictions. Method: table-driven calls of push_filters and row_mask.
"""

from __future__ import annotations

import dataclasses
import datetime

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from connector.spark.columns import ALL_COLUMN_NAMES
from connector.spark.pushdown import PushedFilters, push_filters, row_mask

UTC = datetime.UTC


def _at(micros: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(microseconds=micros)


@pytest.mark.parametrize("item", [
    EqualTo(("body",), b"x"),
    EqualTo(("tags",), "A || B"),  # cannot be spelled as one tag
    EqualTo(("tags",), " A"),
    EqualTo(("tags",), "*"),
    In(("tags",), ("A", None)),
    EqualNullSafe(("queueId",), 1),
    In(("queueOffset",), (1, 2)),
    EqualTo(("storeTimestamp",), _at(5_000)),
    GreaterThan(("storeTimestamp",), datetime.datetime(2026, 1, 1)),  # naive: zone unknown
    IsNull(("tags",)),
    Not(EqualTo(("queueId",), 1)),
    StringStartsWith(("tags",), "A"),
    EqualTo(("msgId",), "0A"),
    GreaterThan(("queueId",), 1),
])
def test_filters_left_to_spark(item) -> None:  # type: ignore[no-untyped-def]
    pushed, kept = push_filters([item], ALL_COLUMN_NAMES)
    assert kept == [item] and kept[0] is item
    assert pushed == PushedFilters()


def test_queue_and_tag_sets_intersect() -> None:
    filters = [In(("queueId",), (1, 2, 3)), EqualTo(("queueId",), 2), In(("tags",), ("A", "B")),
               EqualTo(("tags",), "B")]
    pushed, kept = push_filters(filters, ALL_COLUMN_NAMES)
    assert kept == []
    assert pushed.queue_ids == {2} and pushed.tags == {"B"} and not pushed.empty
    assert pushed.tag_filter(None) == "B" and pushed.tag_filter("B || C") == "B"
    assert len(pushed.described) == 4


def test_contradictions_read_nothing() -> None:
    assert push_filters([EqualTo(("queueId",), 1), EqualTo(("queueId",), 2)],
                        ALL_COLUMN_NAMES)[0].empty
    assert push_filters([GreaterThan(("queueOffset",), 5), LessThanOrEqual(("queueOffset",), 5)],
                        ALL_COLUMN_NAMES)[0].empty
    assert push_filters([GreaterThanOrEqual(("storeTimestamp",), _at(2_000)),
                         LessThan(("storeTimestamp",), _at(2_000))], ALL_COLUMN_NAMES)[0].empty


def test_queue_offset_range() -> None:
    pushed, _ = push_filters([GreaterThan(("queueOffset",), 4), LessThan(("queueOffset",), 9),
                              LessThanOrEqual(("queueOffset",), 20)], ALL_COLUMN_NAMES)
    assert (pushed.queue_offset_min, pushed.queue_offset_end) == (5, 9)
    exact, _ = push_filters([EqualTo(("queueOffset",), 7)], ALL_COLUMN_NAMES)
    assert (exact.queue_offset_min, exact.queue_offset_end) == (7, 8)


@pytest.mark.parametrize("item, low, end", [
    # store times are whole ms on the broker; the bound is in µs
    (GreaterThanOrEqual(("storeTimestamp",), _at(2_000)), 2, None),
    (GreaterThanOrEqual(("storeTimestamp",), _at(2_001)), 3, None),
    (GreaterThan(("storeTimestamp",), _at(2_000)), 3, None),
    (GreaterThan(("storeTimestamp",), _at(1_999)), 2, None),
    (LessThan(("storeTimestamp",), _at(2_000)), None, 2),
    (LessThan(("storeTimestamp",), _at(2_001)), None, 3),
    (LessThanOrEqual(("storeTimestamp",), _at(2_000)), None, 3),
    (LessThanOrEqual(("storeTimestamp",), _at(1_999)), None, 2),
])
def test_time_bounds_round_to_whole_ms(item, low, end) -> None:  # type: ignore[no-untyped-def]
    pushed, kept = push_filters([item], ALL_COLUMN_NAMES)
    assert kept == []
    assert (pushed.store_ms_min, pushed.store_ms_end) == (low, end)


def test_only_columns_of_the_schema_are_pushed() -> None:
    item = EqualTo(("queueId",), 1)
    assert push_filters([item], ("body",))[1] == [item]


def test_row_mask_keeps_the_rows_the_filters_allow() -> None:
    stamps = pa.array([1_000, 2_000, 3_000, 4_000], pa.timestamp("us", tz="UTC"))
    batch = pa.record_batch({"tags": pa.array(["A", None, "B", "A"]), "storeTimestamp": stamps})
    pushed = PushedFilters(tags=frozenset({"A"}), store_ms_min=1, store_ms_end=4)
    assert row_mask(batch, pushed).to_pylist() == [True, False, False, False]
    assert row_mask(batch, PushedFilters(queue_ids=frozenset({1}))) is None


def test_kafka_names_push_as_ours() -> None:
    """columns=kafka: partition, offset and timestamp are queueId, queueOffset and
    storeTimestamp under Kafka's names, so their filters cut the same ranges."""
    ours = [In(("queueId",), (0, 2)), GreaterThanOrEqual(("queueOffset",), 5),
            LessThan(("storeTimestamp",), _at(7_000_500))]
    kafka = [In(("partition",), (0, 2)), GreaterThanOrEqual(("offset",), 5),
             LessThan(("timestamp",), _at(7_000_500))]
    pushed_ours, kept_ours = push_filters(ours, ALL_COLUMN_NAMES)
    pushed_kafka, kept_kafka = push_filters(kafka, ("partition", "offset", "timestamp"))
    assert kept_ours == [] and kept_kafka == []
    assert dataclasses.replace(pushed_kafka, described=()) == \
        dataclasses.replace(pushed_ours, described=())
    stamps = pa.array([6_999_000, 7_000_000, 7_001_000], pa.timestamp("us", tz="UTC"))
    mask = row_mask(pa.record_batch({"timestamp": stamps}), pushed_kafka)
    assert mask is not None and mask.to_pylist() == [True, True, False]

"""Filter pushdown (`spark.sql.python.filterPushdown.enabled`) for batch reads.

Goal: a query returns the same rows with pushdown on and off, for every filter the source takes
(queueId =/IN, tags =/IN, queueOffset ranges, storeTimestamp ranges), for filters it leaves to
Spark, for their mixes and for contradictions; with the conf on, the plan names the pushed
filters, and the source reads less (its partitions cover only the selected queues and ranges);
with the conf off, reads still work. Method: a real broker process with messages written in
three waves (distinct store times), a real SparkSession, chispa for DataFrame equality.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import time
from collections.abc import Iterator

import pytest
from chispa import assert_df_equality
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThanOrEqual,
    In,
    LessThan,
    StringStartsWith,
)

from connector import Admin, ClientConfig, Producer
from connector.spark.datasource import BatchReader
from connector.spark.options import parse_source_options
from connector.spark.partitions import unpacked

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "pushdown_t"
QUEUES = 4
PER_WAVE = 12  # per queue
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
TAGS = ("A", "B", "C", None)


def _wait_next_ms(after_ms: int) -> int:
    """The wall clock in ms once it is past `after_ms` (waves get distinct store times)."""
    while (now_ms := int(time.time() * 1000)) <= after_ms:
        time.sleep(0.001)
    return now_ms


@pytest.fixture(scope="module")
def waves(broker) -> list[int]:  # type: ignore[no-untyped-def]
    """Three waves of messages; returns the ms boundaries [w0 start, w1 start, w2 start]."""
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic(TOPIC, queues=QUEUES)
    starts = []
    with Producer(config) as producer:
        for wave in range(3):
            starts.append(_wait_next_ms(int(time.time() * 1000)))
            rows = [{"body": f"w{wave}-q{q}-{i}".encode(), "queue_id": q,
                     **({} if TAGS[i % 4] is None else {"tags": TAGS[i % 4]})}
                    for q in range(QUEUES) for i in range(PER_WAVE)]
            assert all(r.ok for r in producer.send_batch(TOPIC, rows))
            _wait_next_ms(int(time.time() * 1000) + 1)
    return starts


@contextlib.contextmanager
def pushdown(spark, enabled: bool) -> Iterator[None]:  # type: ignore[no-untyped-def]
    before = spark.conf.get(PUSHDOWN, "false")
    spark.conf.set(PUSHDOWN, str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.set(PUSHDOWN, before)


def query(spark, broker, where: str, **options: str):  # type: ignore[no-untyped-def]
    return (spark.read.format("rocketha").option("brokers", broker.endpoint)
            .option("subscribe", TOPIC).options(**options).load().where(where))


def _stamp(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return f"TIMESTAMP '{moment.strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"


SLOW = pytest.mark.slow  # each case is two Spark jobs (~10 s on the shared CI machine)
WHERES = [
    ("queueId IN (0, 2)", 2 * PER_WAVE * 3),
    ("tags IN ('A', 'C') AND queueId = 3", 3 * PER_WAVE // 2),
    ("queueOffset >= 5 AND queueOffset < 9 AND tags = 'B'", QUEUES),
    ("storeTimestamp >= {w1} AND storeTimestamp < {w2}", QUEUES * PER_WAVE),
    ("storeTimestamp > {w1} AND tags = 'B'", None),  # wave 1's first ms may hold some
    ("tags = 'A' OR queueId = 1", None),  # an OR: Spark's
    pytest.param("queueId = 1", PER_WAVE * 3, marks=SLOW),
    pytest.param("tags = 'A'", QUEUES * 3 * PER_WAVE // 4, marks=SLOW),
    pytest.param("queueOffset = 4 OR queueOffset > 33", QUEUES * 3, marks=SLOW),
    pytest.param("queueOffset <= 2 AND queueOffset > 0", QUEUES * 2, marks=SLOW),
    pytest.param("storeTimestamp < {w1}", QUEUES * PER_WAVE, marks=SLOW),
    pytest.param("storeTimestamp <= {w1} AND queueId IN (1, 2)", None, marks=SLOW),
    pytest.param("body = CAST('w0-q1-3' AS BINARY)", 1, marks=SLOW),
    pytest.param("queueId = 1 AND queueId = 2", 0, marks=SLOW),
    pytest.param("tags IS NULL AND queueId = 0", 3 * PER_WAVE // 4, marks=SLOW),
]


@pytest.mark.parametrize("where, count", WHERES)
def test_same_rows_with_and_without_pushdown(spark, broker, waves, where, count) -> None:
    where = where.format(w1=_stamp(waves[1]), w2=_stamp(waves[2]))
    with pushdown(spark, False):
        plain = query(spark, broker, where).collect()
    with pushdown(spark, True):
        frame = query(spark, broker, where)
        pushed = frame.collect()
    assert count is None or len(plain) == count, (where, len(plain))
    assert_df_equality(spark.createDataFrame(pushed, frame.schema),
                       spark.createDataFrame(plain, frame.schema), ignore_row_order=True)


def test_kafka_names_push_and_read_the_same_rows(spark, broker, waves) -> None:
    """columns=kafka: filters on partition, offset and timestamp are pushed (they are queueId,
    queueOffset and storeTimestamp) and select exactly the rows Spark would."""
    where = (f"partition IN (0, 2) AND offset >= 5 AND offset < 9 "
             f"AND timestamp < {_stamp(waves[2])}")
    with pushdown(spark, False):
        plain = query(spark, broker, where, columns="kafka").collect()
    with pushdown(spark, True):
        frame = query(spark, broker, where, columns="kafka")
        pushed = frame.collect()
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            frame.explain(mode="formatted")
    assert len(plain) == 2 * 4, len(plain)  # queues 0 and 2, offsets 5..8, all in wave 0
    assert_df_equality(spark.createDataFrame(pushed, frame.schema),
                       spark.createDataFrame(plain, frame.schema), ignore_row_order=True)
    listed = printed.getvalue().split("PushedFilters", 1)[1].split("\n", 1)[0]
    assert "partition" in listed and "offset" in listed and "timestamp" in listed, listed


def test_tag_filter_option_and_pushed_tags_are_anded(spark, broker, waves) -> None:
    with pushdown(spark, True):
        both = query(spark, broker, "tags IN ('A', 'B')", tagFilter="B || C").collect()
        none = query(spark, broker, "tags = 'A'", tagFilter="C").collect()
    assert {row.tags for row in both} == {"B"} and len(both) == QUEUES * 3 * PER_WAVE // 4
    assert none == []


def test_explain_names_the_pushed_filters(spark, broker, waves) -> None:
    with pushdown(spark, True):
        frame = query(spark, broker, "queueId = 2 AND tags = 'A' AND length(body) > 3")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            frame.explain(mode="formatted")
    plan = printed.getvalue()
    assert "PushedFilters" in plan, plan
    pushed = plan.split("PushedFilters", 1)[1].split("]", 1)[0]
    assert "queueId" in pushed and "tags" in pushed and "body" not in pushed, plan


def test_the_source_reads_only_what_the_filters_select(broker, waves) -> None:
    """Planning against the broker: pushed filters shrink the partitions themselves."""
    reader = BatchReader(parse_source_options({"brokers": broker.endpoint,
                                               "subscribe": TOPIC}))
    filters = _filters(waves)
    kept = reader.pushFilters(filters)
    assert kept == [filters[-1]]  # the string match stays with Spark
    parts = unpacked(reader.partitions())
    assert {p.queue_id for p in parts} == {1, 3}
    # queueOffset in [10, 30) and stored in wave 1 ([12, 24)): 12..23
    assert {(p.start_queue_offset, p.end_queue_offset) for p in parts} == {(12, 24)}
    assert reader.options.tag_filter == "A"


def _filters(waves: list[int]) -> list[Filter]:
    utc = datetime.UTC
    return [In(("queueId",), (1, 3)), EqualTo(("tags",), "A"),
            GreaterThanOrEqual(("queueOffset",), 10), LessThan(("queueOffset",), 30),
            GreaterThanOrEqual(("storeTimestamp",),
                               datetime.datetime.fromtimestamp(waves[1] / 1000, tz=utc)),
            LessThan(("storeTimestamp",),
                     datetime.datetime.fromtimestamp(waves[2] / 1000, tz=utc)),
            StringStartsWith(("tags",), "A")]

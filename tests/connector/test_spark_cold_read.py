"""readColdFromTier: Spark tasks read tiered ranges straight from the objects, same rows.

Goal: with most of a topic tiered and trimmed locally, a batch read with readColdFromTier=true
plans tier partitions for the tiered part (no broker in their path) and broker partitions for
the rest, and returns exactly the rows of the broker-served read, with tagFilter applied the
same way; a reader built without a tier reader (the bare connector data source) gets an error
naming the option. Method: a real broker process tiering 128 KiB segments to file://, the
session SparkSession, driver-side planning inspected through the reader (given the tier reader
the composition root, pyspark_rocketha, hands to the data source).
"""

from __future__ import annotations

import time

import pytest

from connector import Admin, ClientConfig, Producer
from connector.errors import OptionError
from connector.spark.datasource import BatchReader
from connector.spark.options import parse_source_options
from connector.spark.partitions import ColdRangePartition, QueueRangePartition, unpacked
from pyspark_rocketha import DefaultSource
from tests.integration.broker_process import BrokerProcess
from tests.tiered.broker_tier import SMALL_TIER

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "ColdSpark"
MESSAGES = 3000
COLUMNS = ("topic", "brokerName", "queueId", "queueOffset", "msgId", "key", "tags", "body",
           "properties", "bornTimestamp", "storeTimestamp")


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("cold")
    broker = BrokerProcess(root / "b", tieredStoreUrl=f"file://{root / 'tier'}",
                           **SMALL_TIER).start()
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic(TOPIC, queues=2)
    with Producer(config) as producer:
        for first in range(0, MESSAGES, 300):
            rows = [{"body": b"%06d" % n + b"c" * 300, "key": f"k{n % 13}",
                     "tags": "even" if n % 2 == 0 else "odd"}
                    for n in range(first, first + 300)]
            assert all(result.ok for result in producer.send_batch(TOPIC, rows))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # tiered and trimmed: the broker's minimum moved up
        info = Admin(config).broker_info()
        if info["min_log_position"] > 0 and info["tiered"]["tier_segments"] >= 8:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"nothing tiered and trimmed: {info['tiered']}")
    yield broker
    broker.stop()


def _options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"brokers": broker.endpoint, "subscribe": TOPIC, "columns": "*", **extra}


def _rows(spark, options: dict[str, str]) -> list[tuple]:  # type: ignore[no-untyped-def]
    frame = spark.read.format("rocketha").options(**options).load()
    return sorted((*(row[c] for c in COLUMNS if c != "properties"),
                   sorted((row["properties"] or {}).items())) for row in frame.collect())


def test_planning_splits_tier_and_broker_ranges(tiered_broker: BrokerProcess) -> None:
    reader = BatchReader(parse_source_options(_options(tiered_broker, readColdFromTier="true")),
                         cold_reader=DefaultSource.cold_reader)
    parts = unpacked(reader.partitions())
    cold_rows = sum(p.end_queue_offset - p.start_queue_offset for p in parts
                    if isinstance(p, ColdRangePartition))
    hot_rows = sum(p.end_queue_offset - p.start_queue_offset for p in parts
                   if isinstance(p, QueueRangePartition))
    assert cold_rows > MESSAGES // 2, "most of the topic should come from the tier"
    assert cold_rows + hot_rows == MESSAGES


@pytest.mark.parametrize("tag_filter", [None, "odd"])
def test_cold_read_equals_the_broker_read(spark, tiered_broker: BrokerProcess,
                                          tag_filter: str | None) -> None:
    extra = {} if tag_filter is None else {"tagFilter": tag_filter}
    through_broker = _rows(spark, _options(tiered_broker, **extra))
    from_tier = _rows(spark, _options(tiered_broker, readColdFromTier="true", **extra))
    assert len(through_broker) == (MESSAGES if tag_filter is None else MESSAGES // 2)
    assert from_tier == through_broker


def test_cold_read_with_a_declared_schema(spark, tiered_broker: BrokerProcess) -> None:
    ddl = "tags STRING, body BINARY, queueOffset BIGINT, msgId STRING"
    options = _options(tiered_broker, readColdFromTier="true", tagFilter="even")
    projected = spark.read.format("rocketha").schema(ddl).options(**options).load()
    assert projected.columns == ["tags", "body", "queueOffset", "msgId"]
    got = sorted(tuple(row) for row in projected.collect())
    full = spark.read.format("rocketha").options(**_options(tiered_broker)).load()
    want = sorted(tuple(row) for row in full.where("tags = 'even'").select(
        "tags", "body", "queueOffset", "msgId").collect())
    assert len(got) == MESSAGES // 2
    assert got == want


def test_no_tier_reader_names_the_option(tiered_broker: BrokerProcess) -> None:
    reader = BatchReader(parse_source_options(_options(tiered_broker,
                                                       readColdFromTier="true")))
    with pytest.raises(OptionError, match="readColdFromTier"):
        reader.partitions()

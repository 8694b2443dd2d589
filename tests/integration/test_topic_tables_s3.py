"""Topic tables on S3 (moto's server, authenticated): commits are conditional puts there too.

Goal: (1) a broker process with an s3:// tier materializes a topic into `s3://tier/tables/T`
with every acknowledged message once and each queue's offsets contiguous, read back with
deltalake through the same endpoint, and its `broker info` and `/metrics` show no lag once
the table caught up, and `read_topic` over the s3:// table plus a tail returns each message
once (Spark here has no S3A connector, so the pyarrow reader reads the table's files), and
deleting the topic with its table removes every object under the table's prefix;
(2) on S3, a commit planned on a stale snapshot fails whole (the log
entry is a put-if-absent, `If-None-Match`), and planning again adds no duplicate, so two
writers racing cannot both land one version. Method: tests/tiered/moto_s3.py's server; a real
broker process for (1), two in-process writers on one store for (2) (the race needs a snapshot
held back, which only in-process code can do deterministically).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from pyspark.sql import SparkSession

from connector import Admin, ClientConfig, Producer
from connector.protocol.table_ids import queue_app_id
from connector.spark.read_topic import read_topic
from connector.spark.table_files import choose_reader
from ha.broker.topic_table import TableLimits, TopicTableWriter, table_storage_options
from storage_engine import MessageBatch, MessageStore, PutStatus, StoreConfig
from storage_engine.config import TieredStoreConfig
from tests.ha.replica_set import wait_for
from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.operated_cluster import scrape, value
from tests.tiered.moto_s3 import MotoS3, moto_s3_server

pytestmark = pytest.mark.integration

TOPIC = "orders"
QUEUES = 4
MESSAGES = 800
TAIL = 40  # produced after the table is turned off: read_topic's tail
CATCH_UP_S = 60.0


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    with moto_s3_server() as server:
        server.client().create_bucket(Bucket="tier")  # type: ignore[attr-defined]
        yield server


def _options(s3: MotoS3) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": s3.endpoint_url, "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": s3.access_key_id,
            "AWS_SECRET_ACCESS_KEY": s3.secret_access_key, "conditional_put": "etag"}


def _ends(uri: str, s3: MotoS3) -> list[int | None]:
    try:
        table = DeltaTable(uri, storage_options=_options(s3))
    except TableNotFoundError:
        return [None] * QUEUES
    return [table.transaction_version(queue_app_id("broker-a", q)) for q in range(QUEUES)]


def _read_topic_from_s3(spark: SparkSession, s3: MotoS3, broker: BrokerProcess, admin: Admin,
                        uri: str) -> None:
    """read_topic on the s3:// table: Spark here has no S3A connector (no hadoop-aws JARs),
    so the table's files are read by pyarrow on the executors; the tail (messages produced
    after the table is turned off) through the connector; each message once."""
    admin.update_topic(TOPIC, table="none")
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        tail = [{"body": b"s3-%05d" % n} for n in range(MESSAGES, MESSAGES + TAIL)]
        assert all(result.ok for result in producer.send_batch(TOPIC, tail))
    assert choose_reader(spark, uri, "auto") == "arrow"
    options = {k: v for k, v in _options(s3).items() if k != "conditional_put"}
    frame = read_topic(spark, TOPIC, table=uri, table_storage_options=options,
                       columns=["queueId", "queueOffset", "body"], brokers=broker.endpoint)
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "rocketha_table_files" in plan and s3.secret_access_key not in plan, plan
    rows = frame.collect()
    places = [(row.queueId, row.queueOffset) for row in rows]
    assert len(places) == len(set(places)) == MESSAGES + TAIL
    for queue_id in range(QUEUES):
        offsets = sorted(o for q, o in places if q == queue_id)
        assert offsets == list(range(len(offsets))), f"queue {queue_id}: not contiguous"
    assert sorted(row.body for row in rows) == [b"s3-%05d" % n
                                                for n in range(MESSAGES + TAIL)]


@pytest.mark.spark
def test_a_broker_materializes_every_acked_message_once_to_s3(s3: MotoS3, tmp_path: Path,
                                                              spark: SparkSession) -> None:
    metrics_port = free_port()
    broker = BrokerProcess(tmp_path / "b", topicTableIntervalMs="300",
                           metricsPort=str(metrics_port),
                           **s3.broker_settings("s3://tier")).start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,))
        admin = Admin(config)
        admin.create_topic(TOPIC, queues=QUEUES, table="delta")
        acked = []
        with Producer(config) as producer:
            for first in range(0, MESSAGES, 100):
                rows = [{"body": b"s3-%05d" % n} for n in range(first, first + 100)]
                results = producer.send_batch(TOPIC, rows)
                assert all(result.ok for result in results)
                acked += [(r.queue_id, r.queue_offset) for r in results]
        ends = [q["max_queue_offset"] for q in sorted(admin.queue_offsets(TOPIC),
                                                      key=lambda q: q["queue_id"])]
        uri = f"s3://tier/tables/{TOPIC}"
        wait_for(lambda: _ends(uri, s3) == ends, CATCH_UP_S,
                 f"the table at {ends} ({broker.action('broker_info').get('topic_tables')})")
        table = DeltaTable(uri, storage_options=_options(s3)).to_pyarrow_table()
        places = list(zip(table["queueId"].to_pylist(), table["queueOffset"].to_pylist(),
                          strict=True))
        assert len(places) == len(set(places)) == MESSAGES
        assert sorted(places) == sorted(acked)  # every ack's position, once
        for queue_id in range(QUEUES):
            offsets = sorted(table.filter(pc.equal(table["queueId"], queue_id))["queueOffset"]
                             .to_pylist())
            assert offsets == list(range(len(offsets)))
        assert sorted(table["body"].to_pylist()) == [b"s3-%05d" % n for n in range(MESSAGES)]
        info = broker.action("broker_info")["topic_tables"]["topics"][TOPIC]
        assert info["rows"] == MESSAGES and info["last_error"] is None
        assert (info["lag_messages"], info["lag_seconds"]) == (0, 0.0)
        samples = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
        assert value(samples, "rocketha_topic_table_rows_total", topic=TOPIC) == MESSAGES
        assert value(samples, "rocketha_topic_table_lag_messages", topic=TOPIC) == 0
        assert value(samples, "rocketha_topic_table_last_commit_timestamp_seconds",
                     topic=TOPIC) == info["last_commit_ms"] / 1000
        _read_topic_from_s3(spark, s3, broker, admin, uri)
        assert admin.delete_topic_table(TOPIC) == {"deleted": True, "table_deleted": True}
        with pytest.raises(TableNotFoundError):
            DeltaTable(uri, storage_options=_options(s3))
        assert not s3.client().list_objects_v2(  # type: ignore[attr-defined]
            Bucket="tier", Prefix=f"tables/{TOPIC}/").get("Contents")
    finally:
        broker.stop()


def test_a_stale_commit_on_s3_fails_whole_and_the_replan_adds_no_duplicate(
        s3: MotoS3, tmp_path: Path) -> None:
    uri = "s3://tier/tables/race"
    with MessageStore(tmp_path / "store", StoreConfig()) as store:
        def put(first: int) -> None:
            numbers = range(first, first + 8)
            result = store.put_messages(MessageBatch(TOPIC, [b"r%d" % n for n in numbers],
                                                     [n % 2 for n in numbers]))
            assert result.status is PutStatus.PUT_OK

        def writer() -> TopicTableWriter:
            options = StoreConfig(tiered=TieredStoreConfig(
                url="s3://tier", s3_endpoint_url=s3.endpoint_url, s3_region="us-east-1",
                s3_access_key_id=s3.access_key_id, s3_secret_access_key=s3.secret_access_key))
            return TopicTableWriter(store, topic=TOPIC, broker_name="broker-a", uri=uri,
                                    storage_options=table_storage_options(options),
                                    limits=TableLimits(1000, 1 << 20))
        put(0)
        assert writer().run_pass(1, range(2)).rows == 8
        put(8)
        old, new = writer(), writer()
        stale = new.load()
        new.load = lambda: stale  # type: ignore[method-assign]  # loaded before old's commit
        assert old.run_pass(1, range(2)).rows == 8
        with pytest.raises(CommitFailedError):
            new.run_pass(2, range(2))
        del new.load
        assert new.run_pass(2, range(2)).rows == 0
        table = DeltaTable(uri, storage_options=_options(s3)).to_pyarrow_table()
        places = list(zip(table["queueId"].to_pylist(), table["queueOffset"].to_pylist(),
                          strict=True))
        assert sorted(places) == sorted((q, o) for q in range(2) for o in range(8))

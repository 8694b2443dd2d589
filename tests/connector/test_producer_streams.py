"""A producer's long-lived DoPut stream outlives the per-request timeout without duplicates.

Goal: gRPC's deadline covers a whole stream; a Producer sending for several request timeouts
on one stream must rotate streams before the deadline instead of having a batch cut mid-flight
and re-sent (which stored it twice). Method: a real broker, a 500 ms request timeout, puts for
~2 s on one Producer; every row stored exactly once, no retry logged.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pytest

from connector import Admin, ClientConfig, Producer

pytestmark = pytest.mark.integration

BATCHES_MAX = 5000


def test_busy_stream_longer_than_the_request_timeout(broker, caplog) -> None:  # type: ignore
    config = ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=500)
    Admin(config).create_topic("long_stream", queues=1)
    batch = pa.record_batch({"body": pa.array([b"x" * 100] * 500)})
    sent = 0
    start = time.monotonic()
    with caplog.at_level(logging.INFO, logger="connector.client"), Producer(config) as producer:
        while time.monotonic() - start < 2.0 and sent < BATCHES_MAX * 500:
            assert producer.put("long_stream", batch).status == "PUT_OK"
            sent += 500
    assert time.monotonic() - start >= 2.0, "the run must outlast several request timeouts"
    assert "retry" not in caplog.text
    stored = Admin(config).queue_offsets("long_stream")[0]["max_queue_offset"]
    assert stored == sent

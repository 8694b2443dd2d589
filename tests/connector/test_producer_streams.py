"""A producer's long-lived DoPut stream outlives the per-request timeout without duplicates.

Goal: gRPC's deadline covers a whole stream; a Producer sending for several request timeouts
on one stream must rotate streams before the deadline instead of having a batch cut mid-flight
and re-sent (which stored it twice). Method: a real broker, a 500 ms request timeout, puts for
~2 s on one Producer. Every put gets its full request timeout: a retry is logged only within a
put that lasted at least that long (the machine stalled; CI saw one on 2026-11-27), never after
a stream's deadline cut a put short. Every row is stored once, apart from the at most one
batch a stalled put may have stored twice (the producer is not idempotent).
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pytest

from connector import Admin, ClientConfig, Producer

pytestmark = pytest.mark.integration

BATCHES_MAX = 5000
ROWS = 500
REQUEST_TIMEOUT_MS = 500


def test_busy_stream_longer_than_the_request_timeout(broker, caplog) -> None:  # type: ignore
    config = ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=REQUEST_TIMEOUT_MS)
    Admin(config).create_topic("long_stream", queues=1)
    batch = pa.record_batch({"body": pa.array([b"x" * 100] * ROWS)})
    sent = 0
    short_retries: list[float] = []  # durations (ms) of puts that retried before their timeout
    stalled = 0
    start = time.monotonic()
    with (caplog.at_level(logging.INFO, logger="connector.client.broker_calls"),
          Producer(config) as producer):
        while time.monotonic() - start < 2.0 and sent < BATCHES_MAX * ROWS:
            logged = len(caplog.records)
            began = time.monotonic()
            assert producer.put("long_stream", batch).status == "PUT_OK"
            took_ms = (time.monotonic() - began) * 1000
            if any("retry" in record.getMessage() for record in caplog.records[logged:]):
                if took_ms < REQUEST_TIMEOUT_MS:
                    short_retries.append(took_ms)
                else:
                    stalled += 1
            sent += ROWS
    assert time.monotonic() - start >= 2.0, "the run must outlast several request timeouts"
    assert short_retries == [], f"puts cut before their request timeout: {caplog.text}"
    stored = Admin(config).queue_offsets("long_stream")[0]["max_queue_offset"]
    assert sent <= stored <= sent + stalled * ROWS

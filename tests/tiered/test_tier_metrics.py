"""The tier's upload progress on /metrics and where the console reads it (broker_info).

Goal: a tiered broker's scrape shows sealed segments uploaded (count and bytes), the backlog
draining to 0 and no failed upload. Method: a real broker with 128 KiB segments and the
default file:// tier, ~600 KB produced so several segments seal, scraped with urllib and
parsed by prometheus_client's parser."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.operated_cluster import scrape, value, wait_for
from tests.tiered.broker_tier import SMALL_TIER, produce

pytestmark = pytest.mark.integration


def test_upload_progress_on_metrics(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        metrics_port = sock.getsockname()[1]
    broker = BrokerProcess(tmp_path, **SMALL_TIER, metricsPort=str(metrics_port)).start()
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        produce(broker, batches=10)

        def uploaded() -> bool:
            samples = scrape(url)
            return ((value(samples, "rocketha_tier_uploaded_segments_total") or 0) >= 3
                    and value(samples, "rocketha_tier_upload_backlog_segments") == 0)
        wait_for(uploaded, 30, "three sealed segments uploaded, nothing waiting")
        samples = scrape(url)
        assert value(samples, "rocketha_tier_uploaded_bytes_total") >= 3 * 100_000
        assert value(samples, "rocketha_tier_upload_failures_total") == 0
        tier = broker.action("broker_info")["tiered"]
        assert tier["enabled"] and tier["upload"]["uploaded_segments"] >= 3
    finally:
        broker.stop()

"""Fixtures of the connector tests: one broker process per test module (`python -m ha.broker`);
the session-wide SparkSession is in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.broker_process import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"),
                            flushDiskType="ASYNC_FLUSH").start()
    yield process
    process.stop()

"""Shared fixtures: one local SparkSession per test session (a session costs 5-12 s to start),
one broker process per test module that asks for it (`python -m ha.broker`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.integration.broker_process import BrokerProcess
from tests.support.hosts import test_hosts  # noqa: F401 - a fixture for every test module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need this venv's pyarrow
    # Python workers (driver-side runners and executors) must import this checkout's code
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # local[2,20]: two cores, and a failed task is retried (20 attempts), as on a cluster
    session = (SparkSession.builder.master("local[2,20]").appName("rocketha-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"),
                            flushDiskType="ASYNC_FLUSH").start()
    yield process
    process.stop()

"""`format("rocketha")` under spark-submit with no register() call (the pyspark_rocketha shim).

Goal: a script run by `spark-submit` finds the source by its short name when the package is on
the Python path of the driver and the executors (PYTHONPATH + PYSPARK_PYTHON, what a pip
install provides). Method: a real broker, a real spark-submit subprocess (about 20 s, so slow).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
APP = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
df = spark.read.format("rocketha").option("brokers", sys.argv[1]).option("subscribe", "sub_t")
print("ROWS", df.load().count())
spark.stop()
"""


def test_spark_submit_finds_the_short_name(broker, tmp_path) -> None:  # type: ignore
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic("sub_t", queues=2)
    with Producer(config) as producer:
        assert all(r.ok for r in producer.send_batch("sub_t", [{"body": b"x"}] * 7))
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    submit = Path(sys.executable).parent / "spark-submit"
    done = subprocess.run([str(submit), "--master", "local[2]", str(app), broker.endpoint],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ROWS 7" in done.stdout.splitlines()

"""Spark finds `format("rocketha")` through this module, with no `register()` call.

PySpark imports every top-level module whose name starts with `pyspark_` on the driver's Python
path and registers its `DefaultSource` under `DefaultSource.name()` ("rocketha"). Install the
rocketha package into the Python that the driver and the executors use (`pip install
rocketha[spark]`, or put it on PYTHONPATH / spark.executorEnv.PYTHONPATH); `--py-files` alone is
not enough for streaming reads.
"""

from __future__ import annotations

from connector.datasource import RocketHADataSource as DefaultSource

__all__ = ["DefaultSource"]

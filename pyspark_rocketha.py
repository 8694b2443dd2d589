"""Spark finds `format("rocketha")` through this module, with no `register()` call.

PySpark imports every top-level module whose name starts with `pyspark_` on the driver's Python
path and registers its `DefaultSource` under `DefaultSource.name()` ("rocketha"). Install the
rocketha package into the Python that the driver and the executors use (`pip install
rocketha[spark]`, or put it on PYTHONPATH / spark.executorEnv.PYTHONPATH); `--py-files` alone is
not enough for streaming reads.

Importing it also registers the tier reader for `readColdFromTier=true` (see connector.spark.cold).
"""

from __future__ import annotations

from connector.spark.cold import register_cold_reader
from connector.spark.datasource import RocketHADataSource as DefaultSource
from rocketha_cold import TierObjectReader

__all__ = ["DefaultSource"]

# The composition root of the Spark side: the connector's cold reads (readColdFromTier) use
# the tier's own reader, which the connector may not import itself (DESIGN §2).
register_cold_reader(TierObjectReader())

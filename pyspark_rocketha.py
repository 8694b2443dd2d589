"""Spark finds `format("rocketha")` through this module, with no `register()` call.

PySpark imports every top-level module whose name starts with `pyspark_` on the driver's Python
path and registers its `DefaultSource` under `DefaultSource.name()` ("rocketha"). Install the
rocketha package into the Python that the driver and the executors use (`pip install
rocketha[spark]`, or put it on PYTHONPATH / spark.executorEnv.PYTHONPATH); `--py-files` alone is
not enough for streaming reads.

This is the composition root of the Spark side: the connector's cold reads (readColdFromTier)
use the tier's own reader, which the connector may not import itself (docs/design.md §2), so
`DefaultSource` hands it to the data source (see connector.spark.cold). Spark pickles this
class by reference and the reader inside the Spark readers, so the executors get both.
"""

from __future__ import annotations

from typing import ClassVar

from connector.spark.cold import ColdReader
from connector.spark.datasource import RocketHADataSource
from rocketha_cold import TierObjectReader

__all__ = ["DefaultSource"]


class DefaultSource(RocketHADataSource):
    """The `rocketha` data source with the tier reader for readColdFromTier."""

    cold_reader: ClassVar[ColdReader | None] = TierObjectReader()

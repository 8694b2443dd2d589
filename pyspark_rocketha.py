"""Spark finds `format("rocketha")` through this module, with no `register()` call.

PySpark imports every top-level module whose name starts with `pyspark_` on the driver's Python
path and registers its `DefaultSource` under `DefaultSource.name()` ("rocketha"). Install the
rocketha package into the Python that the driver and the executors use (`pip install
rocketha[spark]`, or put it on PYTHONPATH / spark.executorEnv.PYTHONPATH); `--py-files` alone is
not enough for streaming reads.

Spark does that import for every Python data source lookup of the session, in one worker
(pyspark/sql/worker/lookup_data_sources.py), and an exception there fails the lookup of *every*
Python data source. So on a pyspark the connector cannot serve (before 4.0, from 5 on, or one
whose import of the connector fails) this module defines no `DefaultSource`, which Spark skips,
and logs one line saying why.

This is the composition root of the Spark side: the connector's cold reads (readColdFromTier)
use the tier's own reader, which the connector may not import itself (docs/design.md §2), so
`DefaultSource` hands it to the data source (see connector.spark.cold). Spark pickles this
class by reference and the reader inside the Spark readers, so the executors get both.
"""

from __future__ import annotations

import logging
from typing import ClassVar

__all__ = ["DefaultSource"]

logger = logging.getLogger(__name__)

# the pyspark versions the connector serves (connector.spark.compat.SUPPORTED, which cannot be
# imported to find out: it imports pyspark's data source API)
SUPPORTED_SPARK = ">=4.0,<5"


def unserved_reason(pyspark_version: str | None) -> str | None:
    """Why this pyspark cannot be served (None: it can); no pyspark import."""
    if pyspark_version is None:
        return "pyspark is not installed"
    parts = pyspark_version.split(".")
    try:
        major_minor = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return f"pyspark {pyspark_version} is not a version this module understands"
    if not (4, 0) <= major_minor < (5, 0):
        return f"pyspark {pyspark_version} is outside the supported range {SUPPORTED_SPARK}"
    return None


def _installed_pyspark() -> str | None:
    """pyspark's own version string (a runtime may put pyspark on sys.path without installing
    its distribution, so not importlib.metadata's)."""
    try:
        import pyspark
    except ImportError:
        return None
    return str(getattr(pyspark, "__version__", "unknown"))


_reason = unserved_reason(_installed_pyspark())
if _reason is None:
    try:
        from connector.spark.cold import ColdReader
        from connector.spark.datasource import RocketHADataSource
        from rocketha_cold import TierObjectReader
    except Exception as err:  # noqa: BLE001 - any failure here would break every lookup
        first_line = (str(err).splitlines() or [""])[0]
        _reason = f"the connector failed to import ({type(err).__name__}: {first_line})"
    else:
        class DefaultSource(RocketHADataSource):
            """The `rocketha` data source with the tier reader for readColdFromTier."""

            cold_reader: ClassVar[ColdReader | None] = TierObjectReader()

if _reason is not None:
    __all__ = []
    logger.warning("rocketha: format('rocketha') is not registered: %s", _reason)

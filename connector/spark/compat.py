"""Which Python Data Source API the installed pyspark has, and what the connector needs of it.

The connector serves pyspark 4.0.0 up to (not including) 5. The API grew within 4.x; each piece
below was read in that version's installed sources (pyspark/sql/datasource.py,
pyspark/sql/streaming/datasource.py, the workers in pyspark/sql/worker/ and
python_streaming_source_runner.py):

    feature              first in   where                                   without it
    Arrow batch writer   4.0        DataSourceArrowWriter                   -
    Arrow stream writer  4.1        DataSourceStreamArrowWriter             a row writer
    filter pushdown      4.1        DataSourceReader.pushFilters, Filter    Spark filters every row
    admission control    4.2        latestOffset(start, limit), ReadLimit   maxOffsetsPerTrigger,
                                                                            minOffsetsPerTrigger,
                                                                            maxTriggerDelay refused
    AvailableNow mixin   4.2        SupportsTriggerAvailableNow             Spark's own wrapper: one
                                                                            batch to the offsets of
                                                                            the query's start

Each is detected by looking for the API itself, not by comparing version numbers, so a
vendor's runtime with a backported API gets it. `FEATURE_SINCE` names the version a missing
piece needs, for the one-line refusals (`needs()`).

Where an API is missing, the names below are stand-ins with the same names, so the modules that
use them import on every supported version; Spark never hands them out there (no pushFilters
call on 4.0, no ReadLimit before 4.2), and `API` tells the data source which path to take.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from abc import ABC, abstractmethod

import pyarrow as pa
import pyspark
from pyspark.sql import datasource as _datasource
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType

__all__ = [
    "API",
    "FEATURE_SINCE",
    "SUPPORTED",
    "DataSourceStreamArrowWriter",
    "EqualTo",
    "Filter",
    "GreaterThan",
    "GreaterThanOrEqual",
    "In",
    "LessThan",
    "LessThanOrEqual",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "SparkAPI",
    "SupportsTriggerAvailableNow",
    "arrow_type",
    "needs",
    "parse_version",
    "supported",
]

# pyspark versions the connector serves: [first, end)
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((4, 0), (5, 0))

ARROW_STREAM_WRITER = "Arrow stream writer"
FILTER_PUSHDOWN = "filter pushdown"
ADMISSION_CONTROL = "admission control"
AVAILABLE_NOW = "Trigger.AvailableNow prepared by the source"

# feature -> the first pyspark release that has it (the module docstring's table)
FEATURE_SINCE: dict[str, str] = {
    ARROW_STREAM_WRITER: "4.1",
    FILTER_PUSHDOWN: "4.1",
    ADMISSION_CONTROL: "4.2",
    AVAILABLE_NOW: "4.2",
}


def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a pyspark version string ("4.0.0", "4.1.0.dev1", "4.2")."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if match is None:
        raise ValueError(f"not a pyspark version: {text!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def supported(version: str) -> bool:
    """Whether the connector serves this pyspark version."""
    first, end = SUPPORTED
    return first <= parse_version(version)[:2] < end


@dataclasses.dataclass(frozen=True, slots=True)
class SparkAPI:
    """What this process's pyspark offers the connector (see the module's table)."""

    version: str
    arrow_stream_writer: bool
    filter_pushdown: bool
    admission_control: bool


def needs(feature: str, api: SparkAPI, what: str) -> str:
    """The one-line refusal of `what` on a pyspark without `feature`."""
    return (f"rocketha: {what} needs pyspark {FEATURE_SINCE[feature]} or later ({feature}); "
            f"this is pyspark {api.version}")


# 4.0, 4.1: to_arrow_type(dt, timestamp_utc=True); 4.2 on: to_arrow_type(dt, *, timezone=...)
_TIMEZONE_KEYWORD = "timezone" in inspect.signature(to_arrow_type).parameters


def arrow_type(data_type: DataType) -> pa.DataType:
    """The Arrow type Spark's Python worker expects for `data_type` in a reader's batches
    (timestamps in UTC), whichever spelling this pyspark's converter has."""
    if _TIMEZONE_KEYWORD:
        return to_arrow_type(data_type, timezone="UTC")
    return to_arrow_type(data_type, timestamp_utc=True)  # type: ignore[call-arg]


# -- the API, or stand-ins where this pyspark has none --------------------------------------
try:  # 4.1: filters handed to DataSourceReader.pushFilters
    from pyspark.sql.datasource import (
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )
    _HAS_FILTERS = hasattr(_datasource.DataSourceReader, "pushFilters")
except ImportError:  # 4.0: Spark never pushes filters, so these are never instantiated
    _HAS_FILTERS = False

    class Filter:  # type: ignore[no-redef]
        """Stand-in for pyspark.sql.datasource.Filter (pyspark < 4.1)."""

    def _stand_in(name: str) -> type:
        return type(name, (Filter,), {"__doc__": f"Stand-in for pyspark's {name} (< 4.1)."})

    EqualTo = _stand_in("EqualTo")
    GreaterThan = _stand_in("GreaterThan")
    GreaterThanOrEqual = _stand_in("GreaterThanOrEqual")
    LessThan = _stand_in("LessThan")
    LessThanOrEqual = _stand_in("LessThanOrEqual")
    In = _stand_in("In")

try:  # 4.1: Arrow batches into a streaming write
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
    _HAS_ARROW_STREAM_WRITER = True
except ImportError:  # 4.0: the data source writes rows instead (never this class)
    _HAS_ARROW_STREAM_WRITER = False
    DataSourceStreamArrowWriter = _datasource.DataSourceStreamWriter  # type: ignore

try:  # 4.2: admission control and the AvailableNow mixin (SPARK-55304)
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
    _HAS_ADMISSION_CONTROL = True
except ImportError:  # 4.0, 4.1: latestOffset() without arguments; no ReadLimit reaches us
    _HAS_ADMISSION_CONTROL = False

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for pyspark.sql.streaming.datasource.ReadLimit (pyspark < 4.2)."""

    @dataclasses.dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        pass

    @dataclasses.dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow(ABC):  # type: ignore[no-redef]
        """Stand-in (pyspark < 4.2): Spark does not look for it, so it changes nothing."""

        @abstractmethod
        def prepareForTriggerAvailableNow(self) -> None: ...


API = SparkAPI(version=pyspark.__version__, arrow_stream_writer=_HAS_ARROW_STREAM_WRITER,
               filter_pushdown=_HAS_FILTERS, admission_control=_HAS_ADMISSION_CONTROL)

"""Reading a topic table's snapshot files in Spark: Spark's Parquet reader, or pyarrow.

read_topic (connector/spark/read_topic.py) gets the snapshot's files from delta-rs. Spark's
own Parquet reader is the fast path (column pruning, partition and row-group skipping) but it
opens files through Hadoop's FileSystem, and for s3:// that needs the S3A connector
(hadoop-aws and the AWS SDK JARs), which a plain pyspark install does not have. Without it the
files are read by pyarrow on the executors instead:

    table_reader="auto"   a local path (or file://): Spark
                          s3:// or s3a://: Spark (with s3a:// URIs) when Hadoop has an
                          `s3a` FileSystem class, else pyarrow
    table_reader="spark"  always Spark (s3:// is given to it as s3a://)
    table_reader="arrow"  always pyarrow

The pyarrow path is a Python data source (`rocketha_table_files`, registered when used) with
one partition per task: task i reads files i, i+tasks, ... with pyarrow's S3 (or local)
filesystem, only the asked columns, and gives Spark Arrow batches (no shuffle, no Python
rows, no pandas). It skips no partition or row group by a filter: Spark
filters after the read. The filesystem is built on the executor from delta-rs's storage
options (AWS_ENDPOINT_URL, AWS_REGION, keys, AWS_ALLOW_HTTP), else the AWS environment.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from connector.errors import OptionError
from connector.spark.columns import COLUMN_ARROW_TYPES

__all__ = ["ARROW", "AUTO", "SPARK", "TABLE_READERS", "TableFilesSource", "arrow_files_frame",
           "choose_reader", "spark_uri"]

AUTO, SPARK, ARROW = "auto", "spark", "arrow"
TABLE_READERS = (AUTO, SPARK, ARROW)
_S3_SCHEMES = ("s3", "s3a")
PARTITION_COLUMN = "storeDate"
_STORAGE_PREFIX = "storage."  # a delta-rs storage option, as an option of the files source


def _scheme(uri: str) -> str:
    return uri.partition("://")[0].lower() if "://" in uri else "file"


def spark_uri(uri: str) -> str:
    """`uri` as Hadoop opens it: s3:// as s3a:// (Hadoop's S3 connector's scheme)."""
    return "s3a://" + uri[len("s3://"):] if _scheme(uri) == "s3" else uri


def _hadoop_has(spark: SparkSession, scheme: str) -> bool:
    """Whether the session's Hadoop configuration resolves a FileSystem for `scheme` (False on
    Spark Connect, where the driver's JVM is not reachable: pyarrow is the safe choice)."""
    try:
        jvm: Any = spark._jvm
        conf = spark._jsc.hadoopConfiguration()
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
        return True
    except Exception:  # noqa: BLE001 - ClassNotFound / UnsupportedFileSystem / no JVM
        return False


def choose_reader(spark: SparkSession, uri: str, table_reader: str) -> str:
    """SPARK or ARROW for the table at `uri` (module doc)."""
    if table_reader not in TABLE_READERS:
        raise OptionError(f"read_topic: table_reader={table_reader!r} is not one of "
                          f"{', '.join(TABLE_READERS)}")
    if table_reader != AUTO:
        return table_reader
    if _scheme(uri) not in _S3_SCHEMES:
        return SPARK
    return SPARK if _hadoop_has(spark, "s3a") else ARROW


def _filesystem(uri: str, storage_options: Mapping[str, str]) -> tuple[Any, str]:
    """A pyarrow filesystem for `uri` and the path in it."""
    from pyarrow import fs

    scheme = _scheme(uri)
    if scheme not in _S3_SCHEMES:
        return fs.LocalFileSystem(), uri.removeprefix("file://")
    options = {key.upper(): value for key, value in storage_options.items()}
    kwargs: dict[str, Any] = {}
    endpoint = options.get("AWS_ENDPOINT_URL", "")
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        kwargs["scheme"] = "http" if endpoint.startswith("http://") else "https"
    if options.get("AWS_REGION"):
        kwargs["region"] = options["AWS_REGION"]
    if options.get("AWS_ACCESS_KEY_ID"):
        kwargs["access_key"] = options["AWS_ACCESS_KEY_ID"]
        kwargs["secret_key"] = options.get("AWS_SECRET_ACCESS_KEY", "")
    return fs.S3FileSystem(**kwargs), uri.partition("://")[2]


def _store_date(path: str) -> datetime.date:
    """The `storeDate=YYYY-MM-DD` directory a data file sits in (the table's partition)."""
    for part in path.split("/"):
        if part.startswith(f"{PARTITION_COLUMN}="):
            return datetime.date.fromisoformat(part.split("=", 1)[1])
    raise ValueError(f"{path}: no {PARTITION_COLUMN}= directory in the path")


def arrow_files_frame(spark: SparkSession, files: Sequence[str], schema_ddl: str,
                      columns: Sequence[str], storage_options: Mapping[str, str] | None,
                      tasks_max: int | None = None) -> DataFrame:
    """The rows of `files` (the table's data files), `columns` plus storeDate, read by
    pyarrow in up to `tasks_max` Spark tasks (module doc). `schema_ddl` is the table's schema
    (the connector's columns and storeDate); `tasks_max` defaults to the session's default
    parallelism. The storage options travel as one option each (`storage.<KEY>`), so Spark's
    redaction of option names with "secret" in them hides the secret key in plans."""
    full = StructType.fromDDL(schema_ddl)
    assert isinstance(full, StructType)
    schema = StructType([full[name] for name in [*columns, PARTITION_COLUMN]])
    tasks = max(1, min(len(files), tasks_max or _parallelism(spark)))
    spark.dataSource.register(TableFilesSource)
    reader = (spark.read.format(TableFilesSource.name()).schema(schema)
              .option("files", json.dumps(list(files))).option("tasks", str(tasks)))
    for key, value in (storage_options or {}).items():
        reader = reader.option(f"{_STORAGE_PREFIX}{key}", value)
    return reader.load()


class TableFilesSource(DataSource):
    """`rocketha_table_files`: given data files of a topic table, their rows (registered by
    arrow_files_frame on the session that reads; not a source for users)."""

    @classmethod
    def name(cls) -> str:
        return "rocketha_table_files"

    def reader(self, schema: StructType) -> DataSourceReader:
        return _TableFilesReader(dict(self.options), schema)


class _TableFilesReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.files: list[str] = json.loads(options["files"])
        self.tasks = int(options["tasks"])
        self.storage = {key[len(_STORAGE_PREFIX):]: value for key, value in options.items()
                        if key.lower().startswith(_STORAGE_PREFIX)}
        self.columns = [field.name for field in schema.fields
                        if field.name != PARTITION_COLUMN]

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(task) for task in range(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        filesystem = None
        for path in self.files[partition.value::self.tasks]:
            if filesystem is None:
                filesystem = _filesystem(path, self.storage)[0]
            table = pq.read_table(_filesystem_path(path), columns=self.columns,
                                  filesystem=filesystem)
            target = pa.schema([(name, COLUMN_ARROW_TYPES[name]) for name in self.columns])
            table = table.cast(target).append_column(
                PARTITION_COLUMN, pa.array([_store_date(path)] * table.num_rows, pa.date32()))
            yield from table.to_batches()


def _parallelism(spark: SparkSession) -> int:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return int(spark.conf.get("spark.default.parallelism", "2") or 2)


def _filesystem_path(uri: str) -> str:
    return uri.partition("://")[2] if "://" in uri else uri

"""The Spark data source `rocketha` (Python Data Source API): options, planning, reader,
writer. Importing this package imports no pyspark; `connector.spark.datasource` does."""

__all__: list[str] = []

"""The ``tidemq`` PySpark data source (the only package that imports pyspark)."""

from tidemq.spark.source import TideMQDataSource

__all__ = ["TideMQDataSource"]

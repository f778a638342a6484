"""The ``tidemq`` PySpark data source (the only package that imports pyspark).

:class:`TideMQDataSource` is imported on first use, so the pyspark-free helpers
(:mod:`tidemq.spark.launch`, :mod:`tidemq.spark.options`) load without pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidemq.spark.source import TideMQDataSource

__all__ = ["TideMQDataSource"]


def __getattr__(name: str) -> Any:
    if name == "TideMQDataSource":
        from tidemq.spark.source import TideMQDataSource

        return TideMQDataSource
    raise AttributeError(f"module 'tidemq.spark' has no attribute {name!r}")

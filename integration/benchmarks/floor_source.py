"""The least a Python streaming source can cost Spark per micro-batch, for ``bench_spark_source``.

``format("kafka_ds_floor")`` does no I/O: its offset is a row count that grows with wall time at
``rate`` rows/s, and a task yields that many 100-byte values as one Arrow batch. Run beside
``pykafka`` and ``kafka`` in the overhead measurement, it shows how much of a micro-batch's
duration is the Python DataSource machinery (planner round trips, a Python task, Arrow back to
the JVM) that every Python source pays, and how much is ours on top.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import BinaryType, StructField, StructType


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__(None)
        self.start, self.end = start, end


class _FloorReader(DataSourceStreamReader):
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.started_s = time.time()

    def initialOffset(self) -> dict:
        return {"rows": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # as pykafka's, with limits
        return {"rows": int((time.time() - self.started_s) * self.rate)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Range(start["rows"], end["rows"])]

    def commit(self, end: dict) -> None:
        pass

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        values = [b"%099d" % index for index in range(partition.start, partition.end)]
        yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka_ds_floor"

    def schema(self) -> StructType:
        return StructType([StructField("value", BinaryType())])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _FloorReader(int(self.options.get("rate", "200")))


def register(spark: Any) -> None:
    """Register the source, pickled by value (the workers cannot import this module)."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSource)

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

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Columns built through their buffers, as pykafka's are: pa.array would make pyarrow import
# pandas in the worker (kafka_ds.protocol.arrow_numpy), a cost that is no Python source's
# necessarily, and one that would stay in the workers that later benchmarks share.
from kafka_ds.protocol.arrow_numpy import binary_from_list, from_numpy, repeat_string


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
        yield pa.RecordBatch.from_arrays([binary_from_list(values)], ["value"])


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka_ds_floor"

    def schema(self) -> StructType:
        return StructType([StructField("value", BinaryType())])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _FloorReader(int(self.options.get("rate", "200")))


def register(spark: Any) -> None:
    """Register the sources, pickled by value (the workers cannot import this module)."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(FloorSource)
    spark.dataSource.register(FloorKafkaSource)


# --- the same, shaped like a Kafka topic read -------------------------------------------------
#
# ``format("kafka_ds_floor_kafka")`` yields Spark's Kafka schema for a made-up topic of
# ``partitions`` partitions holding ``rows`` records of ``valueBytes`` each (one constant
# value, no key), as slices of ``batchRows`` rows, with no I/O and next to no Python work: the
# least any Python source pays to hand Spark these rows, in a batch read or in micro-batches
# of ``maxOffsetsPerTrigger`` (planned one task per partition, as ours are). A stand-in for
# ``pykafka`` in ``probe_stream_cpu`` to tell Spark's per-trigger costs from ours.

_KAFKA_FIELDS = (("key", BinaryType()), ("value", BinaryType()), ("topic", StringType()),
                 ("partition", IntegerType()), ("offset", LongType()),
                 ("timestamp", TimestampType()), ("timestampType", IntegerType()))


class _Slice(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__(None)
        self.partition, self.start, self.end = partition, start, end


KAFKA_FORMAT = "kafka_ds_floor_kafka"
_SHAPE_DEFAULTS = {"subscribe": "floor", "partitions": "4", "rows": "600000",
                   "valuebytes": "1000"}


def kafka_shape(rows: int, value_bytes: int, partitions: int = 4) -> tuple[int, dict[str, str]]:
    """The reader options that make ``KAFKA_FORMAT`` a topic of about ``rows`` records of
    ``value_bytes`` in ``partitions`` partitions, and the rows it then holds (whole
    partitions: a read's row count can be checked against it)."""
    whole = rows - rows % partitions
    return whole, {"rows": str(whole), "valueBytes": str(value_bytes),
                   "partitions": str(partitions)}


class _KafkaShape:
    def __init__(self, given: dict[str, str]) -> None:
        options = {**_SHAPE_DEFAULTS, **{key.lower(): value for key, value in given.items()}}
        # The topic column holds the name a read of the real topic would (``subscribe``, as
        # the benchmarks pass to every format): Spark's JVM pays per character of it, about
        # 3.4 ns per row and character, and a fixed 5-character name made the floor ~70 ns
        # per row cheaper than any read of the report's 27-character topics (2026-11-25).
        self.topic = options["subscribe"]
        self.partitions = int(options["partitions"])
        self.rows = int(options["rows"])
        self.value_bytes = int(options["valuebytes"])
        self.batch_rows = int(options.get("batchrows", "8192"))
        max_rows = options.get("maxoffsetspertrigger")
        self.max_rows = int(max_rows) if max_rows else None

    def per_partition(self) -> int:
        return self.rows // self.partitions

    def read(self, part: _Slice) -> Iterator[pa.RecordBatch]:
        # Every column but the offsets is built once per read and sliced (no copy), so that
        # next to nothing of a slice's cost is this source's own.
        size, rows = self.value_bytes, self.batch_rows
        value_offsets = pa.py_buffer(np.arange(0, (rows + 1) * size, size, dtype=np.int32))
        constant = [
            pa.nulls(rows, pa.binary()),
            pa.Array.from_buffers(pa.binary(), rows,
                                  [None, value_offsets, pa.py_buffer(b"v" * (size * rows))]),
            repeat_string(self.topic, rows),
            from_numpy(np.full(rows, part.partition, dtype=np.int32), pa.int32()),
            None,  # the offsets, per slice
            from_numpy(np.full(rows, 1_700_000_000_000_000, dtype=np.int64),
                       pa.timestamp("us", tz="UTC")),
            from_numpy(np.zeros(rows, dtype=np.int32), pa.int32())]
        names = [name for name, _ in _KAFKA_FIELDS]
        for start in range(part.start, part.end, rows):
            n = min(rows, part.end - start)
            columns = [column.slice(0, n) if column is not None
                       else from_numpy(np.arange(start, start + n, dtype=np.int64), pa.int64())
                       for column in constant]
            yield pa.RecordBatch.from_arrays(columns, names)
        # As pykafka's reads do (workerGcFreeze): else Spark's gc.collect() after each task
        # walks the whole worker heap, a cost that is no Python source's necessarily.
        from kafka_ds.spark.worker_gc import freeze_worker_heap

        freeze_worker_heap()


class _FloorKafkaBatch(DataSourceReader):
    def __init__(self, shape: _KafkaShape) -> None:
        self.shape = shape

    def partitions(self) -> list[InputPartition]:
        n = self.shape.per_partition()
        return [_Slice(p, 0, n) for p in range(self.shape.partitions)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return self.shape.read(partition)


class _FloorKafkaStream(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, shape: _KafkaShape) -> None:
        self.shape = shape

    def initialOffset(self) -> dict:
        return {str(p): 0 for p in range(self.shape.partitions)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.shape.max_rows) if self.shape.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        n = self.shape.per_partition()
        step = n
        if isinstance(limit, ReadMaxRows):
            step = max(1, limit.max_rows // self.shape.partitions)
        return {p: min(n, offset + step) for p, offset in start.items()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [_Slice(int(p), start[p], end[p]) for p in sorted(end, key=int)
                if end[p] > start[p]]

    def commit(self, end: dict) -> None:
        pass

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        return self.shape.read(partition)


class FloorKafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return KAFKA_FORMAT

    def schema(self) -> StructType:
        return StructType([StructField(name, kind) for name, kind in _KAFKA_FIELDS])

    def reader(self, schema: StructType) -> DataSourceReader:
        return _FloorKafkaBatch(_KafkaShape(dict(self.options)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _FloorKafkaStream(_KafkaShape(dict(self.options)))

"""From Spark's Arrow batches to ``Producer.send_arrow``: the sink's hot path.

Layer: spark. Spark hands the writer ``pyarrow.RecordBatch``es of the DataFrame (10,000 rows
each by default, ``spark.sql.execution.arrow.maxRecordsPerBatch``). Small ones are gathered
up to ``maxRowsPerSend`` rows or 4 MiB, so that each partition's share makes large Kafka
batches, and sent column by column: values and keys as the binary/string arrays Spark sent
(strings are their UTF-8 bytes already, so a zero-copy cast), headers as the list array,
timestamps as int64 milliseconds, partitions as int64. Rows are split by topic only when a
``topic`` column names several. No Python object is made per row.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_ds.client.delivery import BulkFuture
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.arrow_batches import describe_rows
from kafka_ds.protocol.arrow_numpy import from_numpy, is_valid, to_numpy
from kafka_ds.spark.sink_messages import SinkWriteError
from kafka_ds.spark.sink_options import InputColumns

# Gathered input is sent once it holds this many bytes, whatever its rows: joining costs a
# copy into fresh memory, whose page faults cost more than the copy itself on small VMs, so
# only small batches (of small rows) are joined.
_MAX_GATHER_BYTES = 4 * 1024 * 1024


class RowWriter:
    """Sends a task's rows through one producer and collects the outcome of every send."""

    def __init__(self, producer: Producer, columns: InputColumns, topic: str | None,
                 max_rows_per_send: int) -> None:
        self.producer = producer
        self.columns = columns
        self.topic = topic
        self.max_rows_per_send = max_rows_per_send
        self.futures: list[tuple[str, BulkFuture]] = []
        self.record_count = 0

    def write(self, batches: Iterable[pa.RecordBatch]) -> int:
        """Send every row of ``batches``; returns how many (acknowledgements come later)."""
        for gathered in _gather(batches, self.max_rows_per_send):
            self._send(gathered)
        return self.record_count

    def _send(self, batch: pa.RecordBatch) -> None:
        columns = self.columns
        now_ms = time.time_ns() // 1_000_000
        for topic, rows in self._by_topic(batch):
            future = self.producer.send_arrow(
                topic, rows.column(columns.value),
                rows.column(columns.key) if columns.key else None,
                headers=rows.column(columns.headers) if columns.headers else None,
                timestamps_ms=_timestamps_ms(rows.column(columns.timestamp),
                                             columns.timestamp_is_long, now_ms)
                if columns.timestamp else now_ms,
                partitions=_partitions(rows.column(columns.partition))
                if columns.partition else None)
            self.futures.append((topic, future))
            self.record_count += rows.num_rows

    def _by_topic(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        if self.topic is not None:
            yield self.topic, batch
            return
        assert self.columns.topic is not None
        topics = batch.column(self.columns.topic)
        if topics.null_count:
            rows = np.flatnonzero(~is_valid(topics))
            raise SinkWriteError(
                f"Null topic present in the data ({len(rows)} row(s) of this task: "
                f"{describe_rows(rows, lambda row: 'topic null')}). Use the topic option for "
                "setting a default topic.")
        names = pc.unique(topics)
        if len(names) == 1:
            yield names[0].as_py(), batch
            return
        for name in names:  # Arrow scalars: a Python str here would make pyarrow load pandas
            yield name.as_py(), batch.filter(pc.equal(topics, name))

    def wait(self, timeout_ms: int | None = None) -> None:
        """Flush, then raise one ``SinkWriteError`` summarising every failed send."""
        self.producer.flush(timeout_ms)
        failures: list[tuple[str, BaseException]] = []
        failed_records = 0
        for topic, future in self.futures:
            for batch, error in future.failures():
                failed_records += batch.record_count
                failures.append((f"{topic}-{batch.partition}", error))
        if failures:
            shown = "; ".join(f"{where}: {error}" for where, error in failures[:3])
            more = f"; and {len(failures) - 3} more batch(es)" if len(failures) > 3 else ""
            raise SinkWriteError(
                f"{failed_records} of {self.record_count} records could not be written "
                f"({len(failures)} batch(es) failed): {shown}{more}") from failures[0][1]


def _gather(batches: Iterable[pa.RecordBatch], max_rows: int) -> Iterator[pa.RecordBatch]:
    """Consecutive input batches joined up to ``max_rows`` rows (or ``_MAX_GATHER_BYTES``)."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= max_rows or size >= _MAX_GATHER_BYTES:
            yield _join(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield _join(pending)


def _join(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.RecordBatch.from_arrays(
        [pa.concat_arrays([batch.column(i) for batch in batches])
         for i in range(batches[0].num_columns)], schema=batches[0].schema)


def _timestamps_ms(column: pa.Array, is_long: bool, now_ms: int) -> Any:
    """int64 ms per row, null where the row has none (the producer uses now_ms there)."""
    if is_long:
        return column
    micros = column.cast(pa.int64())
    millis = np.floor_divide(to_numpy(micros), 1000)
    if micros.null_count:
        return from_numpy(millis, pa.int64(), valid=is_valid(micros))
    return millis


def _partitions(column: pa.Array) -> Any:
    partitions = to_numpy(column.cast(pa.int64())).astype(np.int64)  # a copy: nulls set below
    if column.null_count:
        partitions[~is_valid(column)] = -1
    return partitions

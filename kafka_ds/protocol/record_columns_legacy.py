"""``RecordColumns`` built record by record: the path for buffers holding legacy message sets.

Layer: protocol (sans-IO). Imports pyarrow, numpy and this package's ``records`` and
``record_columns``. Topics written before Kafka 0.11 can still hold message format v0/v1
(magic 0/1), which the broker returns as it stored it, possibly between v2 batches. Such data is
rare and old, so it takes the simple per-record decoders (``records``, ``legacy_records``) and
is turned into the same columns as the vectorised path would produce.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_arrow import HEADERS_TYPE
from kafka_ds.protocol.record_columns_types import BatchColumns, RecordColumns
from kafka_ds.protocol.records import DEFAULT_MAX_DECOMPRESSED_BYTES, Buffer, iter_batches


def decode_columns_per_record(
    buf: Buffer,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    include_headers: bool = False,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    topic: str | None = None,
    partition: int | None = None,
    verify_crc: bool = True,
    on_corrupt: str = "raise",
    budget: DecompressionBudget | None = None,
) -> RecordColumns:
    """Same contract as ``record_columns.decode_columns``, one Python object per record.

    As there, ``max_decompressed_bytes`` caps all batches of the call together (v2 batches
    and legacy wrappers draw on one budget), and ``budget`` is charged with them too.
    """
    low = -(2**63) if start_offset is None else start_offset
    high = 2**63 - 1 if end_offset is None else end_offset
    batch_fields: list[list[int]] = [[], [], [], [], [], [], []]
    base_offsets, last_offsets, producer_ids, epochs, txn, control, control_types = batch_fields
    offsets: list[int] = []
    timestamps: list[int] = []
    types: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[dict[str, object]] | None] = []
    batch_index: list[int] = []
    reader = iter_batches(buf, topic=topic, partition=partition, verify_crc=verify_crc,
                          max_decompressed_bytes=max_decompressed_bytes, budget=budget)
    error = None
    for index in itertools.count():
        try:
            batch = next(reader, None)
        except DecodeError as exc:
            if on_corrupt != "truncate":
                raise
            error = exc
            break
        if batch is None:
            break
        last_offsets.append(batch.last_offset)
        producer_ids.append(batch.producer_id)
        epochs.append(batch.producer_epoch)
        txn.append(batch.is_transactional)
        control.append(batch.is_control)
        marker = batch.control_record()
        control_types.append(-1 if marker is None else marker.type)
        in_range = not batch.is_control and batch.last_offset >= low
        records = list(batch) if in_range else []
        # A legacy wrapper's first offset is only known once it is decompressed.
        base_offsets.append(records[0].offset if records and batch.magic < 2
                            else batch.base_offset if batch.magic == 2 else batch.last_offset)
        for record in records:
            if low <= record.offset < high:
                offsets.append(record.offset)
                timestamps.append(record.timestamp_ms)
                types.append(record.timestamp_type)
                keys.append(record.key)
                values.append(record.value)
                headers.append([{"key": k, "value": v} for k, v in record.headers]
                               if record.headers else None)
                batch_index.append(index)
    next_offset = last_offsets[-1] + 1 if last_offsets else None
    if next_offset is not None and start_offset is not None:
        next_offset = max(next_offset, start_offset)
    batches = BatchColumns(
        np.array(base_offsets, dtype=np.int64), np.array(last_offsets, dtype=np.int64),
        np.array(producer_ids, dtype=np.int64), np.array(epochs, dtype=np.int16),
        np.array(txn, dtype=bool), np.array(control, dtype=bool),
        np.array(control_types, dtype=np.int16))
    return RecordColumns(
        offsets=np.array(offsets, dtype=np.int64),
        timestamps_ms=np.array(timestamps, dtype=np.int64),
        timestamp_types=np.array(types, dtype=np.int32),
        keys=pa.array(keys, pa.binary()),
        values=pa.array(values, pa.binary()),
        headers=pa.array(headers, HEADERS_TYPE) if include_headers else None,
        batch_index=np.array(batch_index, dtype=np.int32),
        batches=batches,
        next_offset=next_offset,
        bytes_consumed=reader.position,
        has_partial_batch=reader.has_partial_batch,
        error=error,
    )

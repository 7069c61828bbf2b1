"""Arrow shapes of fetched records: Spark's Kafka source schema, and gathering from buffers.

Layer: protocol (sans-IO). Imports numpy, pyarrow and ``arrow_numpy``; ``record_columns_types``
only for its types.
Spark's Python data source checks that every yielded ``pyarrow.RecordBatch`` has exactly the
Arrow schema it derives from the source's declared schema (``to_arrow_schema``, UTC): ``binary``
not ``large_binary``, ``timestamp[us, tz=UTC]``, int32/int64 as declared, and a list child named
``element``. The schemas below are that, field for field (a test compares them with pyspark's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from numpy.lib.stride_tricks import as_strided

from kafka_ds.protocol.arrow_numpy import from_numpy, repeat_string

if TYPE_CHECKING:
    from kafka_ds.protocol.record_columns_types import RecordColumns

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

HEADER_STRUCT_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
# Spark names a list's child "element" (pyspark's to_arrow_type); match it exactly.
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT_TYPE))
_SPARK_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
SPARK_SCHEMA = pa.schema(_SPARK_FIELDS)
_TIMESTAMP_TYPE = _SPARK_FIELDS[5].type
SPARK_SCHEMA_WITH_HEADERS = pa.schema([*_SPARK_FIELDS, pa.field("headers", HEADERS_TYPE)])


def take_pairs(buffer: pa.Buffer, a_start: Int64Array, a_end: Int64Array, b_start: Int64Array,
               b_end: Int64Array) -> tuple[pa.BinaryArray, pa.BinaryArray]:
    """Gather ``buffer[a_start:a_end]`` and ``buffer[b_start:b_end]`` row by row into two arrays.

    The four boundaries of every row, in order, are the offsets of one BinaryArray over the
    buffer (no copy): its elements 4i and 4i+2 are row i's a and b. Callers guarantee that the
    boundaries never decrease (each record's fields lie in order inside the record).
    """
    rows = len(a_start)
    if not rows:
        return pa.nulls(0, pa.binary()), pa.nulls(0, pa.binary())
    bounds = np.empty((rows, 4), dtype=np.int32)
    bounds[:, 0] = a_start
    bounds[:, 1] = a_end
    bounds[:, 2] = b_start
    bounds[:, 3] = b_end
    segments = pa.Array.from_buffers(pa.binary(), 4 * rows - 1,
                                     [None, pa.py_buffer(bounds), buffer])
    picks = np.arange(0, 4 * rows, 4, dtype=np.int32)
    return (segments.take(from_numpy(picks, pa.int32())),
            segments.take(from_numpy(picks + 2, pa.int32())))


def gather(data: npt.NDArray[np.uint8], buffer: pa.Buffer, starts: Int64Array,
           ends: Int64Array) -> pa.BinaryArray:
    """``data[starts[i]:ends[i]]`` for every row, as one binary array (``buffer`` is ``data``'s).

    When every non-empty element has the same length (fixed-size values, null or fixed keys:
    the common case), numpy copies them as rows of a strided view of ``data`` into an output
    of the exact size. Arrow's ``take`` sizes its output from the mean element of its input
    (here, elements and the gaps between them) and grows it by copying: on fresh memory that
    cost 4x the copy itself for 1 KB values. Otherwise ``take`` picks from an array of the
    elements and gaps alternating (one growth at most).
    """
    rows = len(starts)
    lengths = ends - starts
    width = int(lengths.max()) if rows else 0
    filled = lengths != 0
    every = bool(filled.all())
    if width == 0 or (lengths[filled] == width).all():
        picked = starts if every else starts[filled]
        # Row r of the view is data[r:r + width]; every row gathered lies inside ``data``.
        rows_view = as_strided(data, shape=(max(len(data) - width + 1, 0), width),
                               strides=(1, 1), writeable=False)
        values = rows_view[picked] if len(picked) else np.empty(0, dtype=np.uint8)
        offsets = np.empty(rows + 1, dtype=np.int32)
        offsets[0] = 0
        if every:
            offsets[1:] = np.arange(width, (rows + 1) * width, width, dtype=np.int32)
        else:
            np.cumsum(lengths, out=offsets[1:])
        return pa.Array.from_buffers(pa.binary(), rows,
                                     [None, pa.py_buffer(offsets), pa.py_buffer(values)])
    bounds = np.empty((rows, 2), dtype=np.int32)
    bounds[:, 0] = starts
    bounds[:, 1] = ends
    segments = pa.Array.from_buffers(pa.binary(), 2 * rows - 1,
                                     [None, pa.py_buffer(bounds), buffer])
    return segments.take(from_numpy(np.arange(0, 2 * rows, 2, dtype=np.int32), pa.int32()))


def with_validity(array: pa.BinaryArray, valid: BoolArray) -> pa.BinaryArray:
    """``array`` (a fresh binary array) with the elements where ``valid`` is False made null."""
    if valid.all():
        return array
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    _, offsets, data = array.buffers()
    return pa.Array.from_buffers(array.type, len(array), [bitmap, offsets, data],
                                 null_count=len(valid) - int(np.count_nonzero(valid)))


def to_arrow(columns: RecordColumns, topic: str, partition: int, *,
             include_headers: bool = False) -> pa.RecordBatch:
    """Shape ``columns`` as Spark's Kafka source rows (``SPARK_SCHEMA`` or ``..._WITH_HEADERS``).

    key binary, value binary, topic string, partition int32, offset int64,
    timestamp timestamp[us, UTC], timestampType int32 [, headers list<struct<key, value>>].
    """
    rows = len(columns)
    timestamps_us = columns.timestamps_ms * 1000
    arrays = [
        columns.keys,
        columns.values,
        repeat_string(topic, rows),
        from_numpy(np.full(rows, partition, dtype=np.int32), pa.int32()),
        from_numpy(columns.offsets, pa.int64()),
        from_numpy(timestamps_us, _TIMESTAMP_TYPE),
        from_numpy(columns.timestamp_types, pa.int32()),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(arrays, schema=SPARK_SCHEMA)
    if columns.headers is None:
        raise ValueError("to_arrow(include_headers=True) needs columns decoded with headers")
    return pa.RecordBatch.from_arrays([*arrays, columns.headers],
                                      schema=SPARK_SCHEMA_WITH_HEADERS)

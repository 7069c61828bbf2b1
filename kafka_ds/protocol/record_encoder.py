"""Encode record batches from columns, with no Python work per record (for bulk sends).

Layer: protocol (sans-IO). Imports numpy, pyarrow and this package's ``records``,
``record_builder``, ``varint_arrays``, ``arrow_numpy``, ``compression`` and ``errors``. The
output is byte-identical to ``records.encode_batch`` given the same records (tests hold the two
together).

The mirror image of ``record_columns``. A record is the concatenation of pieces::

    prefix_i  = length varint, attributes 0, timestampDelta, offsetDelta, keyLength varint
    key_i     (from the keys array)
    vlen_i    = valueLength varint
    value_i   (from the values array)
    headers_i = headersCount varint, then per header: keyLength, key, valueLength, value

All varints of all records are built at once by numpy: a (records, fields) matrix of values
becomes a byte tensor with a mask of the bytes in use, and one boolean-index step flattens it
into the prefix, value-length and headers-count pieces of every record, back to back. Without
headers, the prefixes and the value lengths form two Arrow BinaryArrays, and Arrow's
``binary_join_element_wise`` joins prefix, key, value length, value and a headers count of 0
row by row: the data buffer of the result is the records section, written with one copy of the
keys and values. Record lengths are known before anything is written, because every piece's
size is.

Headers add two small pieces per header (its key and value lengths) plus its key and value:
then the small pieces form one BinaryArray (three elements per record), all arrays are
concatenated, and one ``take`` with an interleaving index writes every piece in order. The numpy
path costs about sixty numpy/Arrow calls per call whatever its size, so batches under
``_VECTOR_MIN_ROWS`` records go through the per-record encoder instead, and
``encode_records_sections`` encodes several batches in one call; either way the bytes are the
same.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kafka_ds.protocol.arrow_numpy import (
    binary_scalar,
    from_numpy,
    is_valid,
    list_offsets,
)
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import EncodeError
from kafka_ds.protocol.record_builder import (
    NewRecord,
    assemble_batch,
    batch_attributes,
    encode_records,
)
from kafka_ds.protocol.records import NO_TIMESTAMP, TimestampType
from kafka_ds.protocol.varint_arrays import ragged_bytes, varint_sizes

Int64Array = npt.NDArray[np.int64]
# Arrow arrays (pyarrow has no type information, hence Any) or plain Python sequences.
BinaryLike: TypeAlias = "pa.Array | pa.ChunkedArray | Sequence[bytes | None]"
HeadersLike: TypeAlias = (
    "pa.Array | pa.ChunkedArray | Sequence[Sequence[tuple[str, bytes | None]] | None]")

_MAX_SECTION_BYTES = 2**31 - 1  # one Arrow binary array holds the whole section
# Below this many records the per-record encoder is faster than numpy's fixed cost per call
# (about 60 numpy/Arrow calls per batch, whatever its size).
_VECTOR_MIN_ROWS = 40
# The joins' separator, an Arrow scalar: given as b"", pyarrow would import pandas (arrow_numpy).
_NO_SEPARATOR = binary_scalar(b"")


def encode_records_section(
    keys: BinaryLike,
    values: BinaryLike,
    timestamp_deltas: Int64Array,
    offset_deltas: Int64Array | None = None,
    headers: HeadersLike | None = None,
) -> memoryview:
    """The uncompressed records section of a batch, from columns.

    Parameters
    ----------
    keys, values
        Nullable binary columns (Arrow binary/string/large_binary arrays or sequences of
        bytes/None) of the same length.
    timestamp_deltas
        Each record's timestamp minus the batch's base timestamp (int64).
    offset_deltas
        Each record's offset minus the base offset; default ``0, 1, 2, ...``.
    headers
        Optional ``list<struct<key: string, value: binary>>`` column (or sequences of
        ``(str, bytes | None)`` pairs); a null or empty list means no headers.
    """
    key_array = binary_column(keys, "keys")
    value_array = binary_column(values, "values")
    rows = len(key_array)
    if len(value_array) != rows or len(timestamp_deltas) != rows:
        raise EncodeError(f"column lengths differ: {rows} keys, {len(value_array)} values, "
                          f"{len(timestamp_deltas)} timestamps")
    if not rows:
        return memoryview(b"")
    if offset_deltas is None:
        offset_deltas = np.arange(rows, dtype=np.int64)
    elif len(offset_deltas) != rows:
        raise EncodeError(f"{len(offset_deltas)} offset deltas for {rows} records")
    _check_int32(offset_deltas, "offset delta")
    if rows < _VECTOR_MIN_ROWS:
        return _encode_few(key_array, value_array, timestamp_deltas, offset_deltas, headers)
    return _encode_vectorized(key_array, value_array, timestamp_deltas, offset_deltas,
                              headers)[0]


def encode_records_sections(
    keys: pa.Array,
    values: pa.Array,
    timestamp_deltas: Int64Array,
    offset_deltas: Int64Array,
    headers: pa.Array | None = None,
) -> tuple[memoryview, Int64Array]:
    """Several batches' records sections encoded by one call, back to back, and where each
    record ends in the result.

    ``keys`` and ``values`` are Arrow binary arrays, ``headers`` as in
    ``encode_records_section``. When the deltas restart at each batch's first record (offset
    delta 0, timestamp delta from that record's timestamp), the records ``[a, b)`` of a batch
    are ``section[ends[a - 1]:ends[b - 1]]`` (0 for ``a == 0``): the same bytes as
    ``encode_records_section`` of those records alone. The numpy fixed cost (about sixty calls)
    is paid once for all the batches instead of once each: it dominates when records are large
    and a batch holds only a few hundred of them.
    """
    rows = len(values)
    if len(keys) != rows or len(timestamp_deltas) != rows or len(offset_deltas) != rows:
        raise EncodeError(f"column lengths differ: {len(keys)} keys, {rows} values, "
                          f"{len(timestamp_deltas)} timestamps, {len(offset_deltas)} offsets")
    if not rows:
        return memoryview(b""), np.zeros(0, dtype=np.int64)
    _check_int32(offset_deltas, "offset delta")
    section, record_bytes = _encode_vectorized(keys, values, timestamp_deltas, offset_deltas,
                                               headers)
    return section, np.cumsum(record_bytes)


def _encode_vectorized(key_array: pa.Array, value_array: pa.Array, timestamp_deltas: Int64Array,
                       offset_deltas: Int64Array, headers: HeadersLike | None
                       ) -> tuple[memoryview, Int64Array]:
    """The numpy/Arrow encoder: the section, and each record's encoded bytes."""
    rows = len(value_array)
    header_parts = _header_parts(headers, rows)
    if header_parts is None and key_array.null_count == rows and not value_array.null_count:
        return _encode_values_only(value_array, timestamp_deltas, offset_deltas)
    key_lengths = binary_lengths(key_array)
    value_lengths = binary_lengths(value_array)

    # One row per record: the varints that surround the key and value, in wire order.
    # Column 0 (the record length) is filled in once the others' sizes are known; column 1 is
    # the attributes byte, which encodes as a varint 0.
    fields = np.zeros((rows, 7), dtype=np.int64)
    fields[:, 2] = timestamp_deltas
    fields[:, 3] = offset_deltas
    fields[:, 4] = key_lengths
    fields[:, 5] = value_lengths
    headers_payload: Int64Array | int = 0
    if header_parts is not None:
        fields[:, 6] = header_parts.counts
        headers_payload = header_parts.payload_bytes
    sizes = np.empty((rows, 7), dtype=np.int64)
    sizes[:, 1] = 1
    sizes[:, 2:] = varint_sizes(fields[:, 2:])
    body_bytes = (sizes[:, 1:].sum(axis=1) + np.maximum(key_lengths, 0)
                  + np.maximum(value_lengths, 0) + headers_payload)
    fields[:, 0] = body_bytes
    sizes[:, 0] = varint_sizes(body_bytes)
    record_bytes = body_bytes + sizes[:, 0]
    total = int(record_bytes.sum())
    if total > _MAX_SECTION_BYTES:
        raise EncodeError(f"records section of {total} bytes cannot be encoded in one batch")
    if header_parts is None:
        # Five pieces per record, joined row by row: one copy of the keys and values (a
        # concatenation then a take would copy them twice; at 1 KB per record the copies
        # are most of the encoder's time). The headers count is 0, one byte.
        prefix_bytes = sizes[:, :5].sum(axis=1)
        section = pc.binary_join_element_wise(
            _binary_array(ragged_bytes(fields[:, :5], sizes[:, :5])[0], prefix_bytes),
            key_array,
            _binary_array(ragged_bytes(fields[:, 5], sizes[:, 5])[0], sizes[:, 5]),
            value_array, _zero_bytes(rows), _NO_SEPARATOR,
            null_handling="replace", null_replacement=b"")  # null key or value: no bytes
    else:
        small_data, _ = ragged_bytes(fields, sizes)
        # Three small pieces per record: [length .. keyLength], [valueLength],
        # [headersCount], then the headers' pieces, interleaved by one take.
        piece_bytes = np.empty((rows, 3), dtype=np.int64)
        piece_bytes[:, 0] = sizes[:, :5].sum(axis=1)
        piece_bytes[:, 1:] = sizes[:, 5:]
        arrays = [_binary_array(small_data, piece_bytes), key_array, value_array,
                  *header_parts.arrays]
        order = from_numpy(_interleave_with_headers(rows, header_parts.counts), pa.int32())
        section = pa.concat_arrays(arrays).take(order)
    data = section.buffers()[2]
    if data is None:
        raise EncodeError(f"records section of {total} bytes cannot be encoded in one batch")
    return memoryview(data)[:total], record_bytes


def _encode_values_only(value_array: pa.Array, timestamp_deltas: Int64Array,
                        offset_deltas: Int64Array) -> tuple[memoryview, Int64Array]:
    """The common case of a sink: every key null, no headers, no null value.

    A record is then ``prefix_i value_i 0x00`` (the headers count), and the count of record
    ``i`` can open record ``i + 1``'s prefix instead. So the small pieces are one varint matrix
    whose row ``i`` is ``[previous headers count, length, attributes, timestampDelta,
    offsetDelta, keyLength -1, valueLength]`` (no count before the first record; a last row
    holding only the final count), and the section is those pieces and the values joined
    pairwise: two arrays instead of five, and no null handling. (Fixed-width values copied as
    a strided (records, record bytes) matrix instead were measured slower: numpy copies a
    strided row of 100 bytes byte by byte, where Arrow's join copies whole values.)
    """
    rows = len(value_array)
    value_lengths = binary_lengths(value_array)
    # Sizes from the three varying fields alone, each a contiguous column (row sums and
    # varint sizes over the strided matrix cost a third of this function's time): the
    # attributes, the keyLength -1 and the headers count take one byte each.
    timestamp_sizes = varint_sizes(timestamp_deltas)
    offset_sizes = varint_sizes(offset_deltas)
    value_length_sizes = varint_sizes(value_lengths)
    body_bytes = timestamp_sizes + offset_sizes + value_length_sizes + value_lengths + 3
    length_sizes = varint_sizes(body_bytes)
    record_bytes = body_bytes + length_sizes
    total = int(record_bytes.sum())
    if total > _MAX_SECTION_BYTES:
        raise EncodeError(f"records section of {total} bytes cannot be encoded in one batch")
    fields = np.zeros((rows + 1, 7), dtype=np.int64)
    fields[:rows, 1] = body_bytes
    fields[:rows, 3] = timestamp_deltas
    fields[:rows, 4] = offset_deltas
    fields[:rows, 5] = -1
    fields[:rows, 6] = value_lengths
    sizes = np.zeros((rows + 1, 7), dtype=np.int64)
    sizes[1:, 0] = 1  # the previous record's headers count, 0
    sizes[:rows, 1] = length_sizes
    sizes[:rows, 2] = 1  # attributes, 0
    sizes[:rows, 3] = timestamp_sizes
    sizes[:rows, 4] = offset_sizes
    sizes[:rows, 5] = 1  # keyLength -1
    sizes[:rows, 6] = value_length_sizes
    # Each row's small piece: its record less the value and the headers count, plus the
    # previous record's count (none before the first); the last row is that count alone.
    piece_bytes = np.empty(rows + 1, dtype=np.int64)
    piece_bytes[:rows] = record_bytes - value_lengths
    piece_bytes[0] -= 1
    piece_bytes[rows] = 1
    small_data, _ = ragged_bytes(fields, sizes)
    joined = pc.binary_join_element_wise(_binary_array(small_data, piece_bytes),
                                         _with_empty_last(value_array), _NO_SEPARATOR)
    data = joined.buffers()[2]
    if data is None:
        raise EncodeError(f"records section of {total} bytes cannot be encoded in one batch")
    return memoryview(data)[:total], record_bytes


def _with_empty_last(values: pa.Array) -> pa.Array:
    """``values`` and one more, empty, element: zero-copy but for the offsets."""
    rows = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)
    extended = np.empty(rows + 2, dtype=np.int32)
    extended[:rows + 1] = offsets[values.offset:values.offset + rows + 1]
    extended[rows + 1] = extended[rows]
    return pa.Array.from_buffers(pa.binary(), rows + 1,
                                 [None, pa.py_buffer(extended), values.buffers()[2]])


def encode_batch_columns(
    keys: BinaryLike,
    values: BinaryLike,
    timestamps_ms: Int64Array,
    headers: HeadersLike | None = None,
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = -1,
    offset_deltas: Int64Array | None = None,
    max_timestamp_ms: int | None = None,
) -> bytes:
    """A complete v2 batch (header, compression, CRC) from columns; see ``records.encode_batch``.

    The base timestamp is the first record's, as the per-record encoder sets it.
    """
    timestamps = np.asarray(timestamps_ms, dtype=np.int64)
    rows = len(timestamps)
    base_timestamp = int(timestamps[0]) if rows else NO_TIMESTAMP
    section = encode_records_section(keys, values, timestamps - base_timestamp, offset_deltas,
                                     headers)
    if offset_deltas is None:
        last_offset_delta = rows - 1
    else:
        last_offset_delta = int(offset_deltas[-1]) if rows else -1
    # As the Java builder: the running maximum starts at NO_TIMESTAMP (-1).
    max_timestamp = max(int(timestamps.max()), NO_TIMESTAMP) if rows else NO_TIMESTAMP
    return assemble_batch(
        section,
        attributes=batch_attributes(compression, timestamp_type, is_transactional, False),
        record_count=rows, last_offset_delta=last_offset_delta, base_offset=base_offset,
        base_timestamp_ms=base_timestamp,
        max_timestamp_ms=max_timestamp if max_timestamp_ms is None else max_timestamp_ms,
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch, compression_level=compression_level,
    )


# --- pieces --------------------------------------------------------------------------------

def _encode_few(keys: pa.Array, values: pa.Array, timestamp_deltas: Int64Array,
                offset_deltas: Int64Array, headers: HeadersLike | None) -> memoryview:
    """Small batches: the per-record encoder on Python objects (the same bytes)."""
    if headers is None:
        header_lists: list[list[tuple[str, bytes | None]]] = [[] for _ in range(len(keys))]
    else:
        if isinstance(headers, pa.ChunkedArray):
            headers = headers.combine_chunks()
        raw = headers.to_pylist() if isinstance(headers, pa.Array) else list(headers)
        if len(raw) != len(keys):
            raise EncodeError(f"{len(raw)} header lists for {len(keys)} records")
        header_lists = [[(h["key"], h["value"]) if isinstance(h, dict) else tuple(h)
                         for h in record or ()] for record in raw]
        if any(key is None for record in header_lists for key, _ in record):
            raise EncodeError("header keys must not be null")
    records = [NewRecord(key, value, int(delta), record_headers, int(offset_delta))
               for key, value, delta, offset_delta, record_headers in zip(
                   keys.to_pylist(), values.to_pylist(), timestamp_deltas.tolist(),
                   offset_deltas.tolist(), header_lists, strict=True)]
    return memoryview(encode_records(records, 0))


def binary_column(column: BinaryLike, name: str) -> pa.Array:
    """``column`` as an Arrow ``binary`` array (strings become their UTF-8 bytes, zero-copy;
    large types are narrowed); ``EncodeError`` names ``name`` for any other type."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not isinstance(column, pa.Array):
        column = pa.array(column, pa.binary())
    if column.type in (pa.string(), pa.large_string()):
        column = column.cast(pa.binary() if column.type == pa.string() else pa.large_binary())
    if column.type == pa.large_binary():
        column = column.cast(pa.binary())
    if column.type != pa.binary():
        raise EncodeError(f"{name} must be binary, got {column.type}")
    return column


def binary_lengths(column: pa.Array) -> Int64Array:
    """Byte length of each element, -1 for nulls (an int32-offset binary array)."""
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)
    offsets = offsets[column.offset:column.offset + len(column) + 1].astype(np.int64)
    lengths = np.diff(offsets)
    if column.null_count:
        lengths[~is_valid(column)] = -1
    return lengths


def _check_int32(values: Int64Array, what: str) -> None:
    if len(values) and (values.min() < -(2**31) or values.max() >= 2**31):
        raise EncodeError(f"{what} out of the int32 range")


def _binary_array(data: npt.NDArray[np.uint8], element_bytes: Int64Array) -> pa.Array:
    """A BinaryArray over ``data`` whose elements have the (row-major) sizes given."""
    offsets = np.zeros(element_bytes.size + 1, dtype=np.int32)
    np.cumsum(element_bytes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), element_bytes.size,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _interleave_rows(rows: int) -> npt.NDArray[np.int32]:
    """Take order over [small pieces (3 per record), keys, values]: P K M V T per record."""
    index = np.arange(rows, dtype=np.int32)
    order = np.empty((rows, 5), dtype=np.int32)
    order[:, 0] = 3 * index
    order[:, 1] = 3 * rows + index
    order[:, 2] = 3 * index + 1
    order[:, 3] = 4 * rows + index
    order[:, 4] = 3 * index + 2
    return order


@functools.lru_cache(maxsize=32)
def _zero_bytes(rows: int) -> pa.Array:
    """``rows`` one-byte elements 0x00 (a headers count of 0), cached: sizes often repeat."""
    return pa.Array.from_buffers(pa.binary(), rows, [
        None, pa.py_buffer(np.arange(rows + 1, dtype=np.int32)),
        pa.py_buffer(np.zeros(rows, dtype=np.uint8))])


class _HeaderParts(NamedTuple):
    counts: Int64Array  # headers per record
    payload_bytes: Int64Array  # bytes of each record's headers after the count varint
    arrays: list[pa.Array]  # [length varints (2 per header), keys, values]


def _header_parts(headers: HeadersLike | None, rows: int) -> _HeaderParts | None:
    if headers is None:
        return None
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    array: Any = headers
    if not isinstance(headers, pa.Array):
        array = pa.array(
            [None if not record else [{"key": k, "value": v} for k, v in record]
             for record in headers],
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    if len(array) != rows:
        raise EncodeError(f"{len(array)} header lists for {rows} records")
    counts = np.diff(list_offsets(array))
    if array.null_count:
        counts[~is_valid(array)] = 0
    if not counts.any():
        return None
    flat = array.flatten()  # the header structs of non-null lists, in record order
    header_keys = binary_column(flat.field("key"), "header keys")
    header_values = binary_column(flat.field("value"), "header values")
    if header_keys.null_count:
        raise EncodeError("header keys must not be null")
    lengths = np.empty((len(header_keys), 2), dtype=np.int64)
    lengths[:, 0] = binary_lengths(header_keys)
    lengths[:, 1] = binary_lengths(header_values)
    small_data, sizes = ragged_bytes(lengths)
    per_header = sizes.sum(axis=1) + np.maximum(lengths, 0).sum(axis=1)
    summed = np.zeros(len(per_header) + 1, dtype=np.int64)
    np.cumsum(per_header, out=summed[1:])
    starts = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    payload = summed[starts[1:]] - summed[starts[:-1]]
    return _HeaderParts(counts, payload,
                        [_binary_array(small_data, sizes), header_keys, header_values])


def _interleave_with_headers(rows: int, counts: Int64Array) -> npt.NDArray[np.int32]:
    """Take order over [small pieces, keys, values, header lengths, header keys, values].

    In the output, record i's five pieces start at ``5 i + 4 (headers before record i)``, and
    header j (counted over all records, owned by record r) starts at ``5 (r + 1) + 4 j``.
    """
    total = int(counts.sum())
    record_of = np.repeat(np.arange(rows, dtype=np.int64), counts)
    before = np.zeros(rows, dtype=np.int64)
    np.cumsum(counts[:-1], out=before[1:])
    order = np.empty(5 * rows + 4 * total, dtype=np.int32)
    record_at = 5 * np.arange(rows, dtype=np.int64) + 4 * before
    order[np.add.outer(record_at, np.arange(5))] = _interleave_rows(rows)
    header = np.arange(total, dtype=np.int64)
    base = 5 * rows  # the header arrays follow the record arrays in the concatenation
    pieces = np.stack([base + 2 * header, base + 2 * total + header,
                       base + 2 * header + 1, base + 3 * total + header], axis=1)
    order[np.add.outer(5 * (record_of + 1) + 4 * header, np.arange(4))] = pieces
    return order

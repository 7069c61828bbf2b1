"""Decode a whole fetch buffer into columns, with no Python object per record.

Layer: protocol (sans-IO). Imports numpy, pyarrow, ``crc32c`` and this package's ``records``,
``compression``, ``varint_arrays`` and ``errors``. The format is described in ``records``; this
module decodes the same bytes as ``records.decode_records`` and must agree with it record for
record (tests compare the two on random batches).

How, for one partition's ``records`` bytes (many batches, some compressed):

1. One Python loop over batch headers: one ``unpack_from`` of the 61-byte header and one
   CRC-32C per batch. Batches wholly outside ``[start_offset, end_offset)`` are checked but not
   decompressed; compressed batches are decompressed (under the size cap).
2. The records sections are laid end to end in one buffer (the fetch buffer itself when nothing
   was compressed, else the decompressed sections, written in place into a ``DecodeArea`` the
   caller may keep from one call to the next). One thin Python loop follows each record's
   length varint to find where every record starts: the only step that is sequential by
   nature.
3. numpy decodes every other field of every record at once (``varint_arrays``), checks that each
   record's fields end exactly where its length says, and drops rows outside the offset range.
4. Keys and values are gathered by Arrow (``record_arrow.take_pairs``: two ``take`` calls over
   a zero-copy binary array of the buffer, one memcpy per value in C++). Headers go the same
   way, one header slot at a time.

Control batches never produce rows; their marker type is kept per batch for ``read_committed``.
Buffers holding legacy (magic 0/1) message sets take a per-record path with the same output.
``record_arrow.to_arrow`` (re-exported here) shapes the result as Spark's Kafka source schema.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

import crc32c as _crc32c
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError
from kafka_ds.protocol.primitives import read_varint
from kafka_ds.protocol.record_arrow import (
    HEADER_STRUCT_TYPE,
    HEADERS_TYPE,
    SPARK_SCHEMA,
    SPARK_SCHEMA_WITH_HEADERS,
    take_pairs,
    to_arrow,
    with_validity,
)
from kafka_ds.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    HEADER_BYTES,
    HEADER_STRUCT,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    MIN_RECORD_BYTES,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Buffer,
    RecordBatch,
    RecordBatchHeader,
    _describe,
)
from kafka_ds.protocol.varint_arrays import decode_varints

__all__ = ["HEADERS_TYPE", "SPARK_SCHEMA", "SPARK_SCHEMA_WITH_HEADERS", "BatchColumns",
           "DecodeArea", "RecordColumns", "ScannedBuffer", "decode_columns", "finish_columns",
           "scan_buffer", "to_arrow"]

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# Arrow binary arrays use int32 offsets: the joined records buffer must stay below 2 GiB.
_MAX_AREA_BYTES = 2**31 - 1
_LOG_HEADER = struct.Struct(">qi")
# A DecodeArea keeps its buffer between calls up to this size (a larger one, from an unusually
# large response, is let go after use).
_KEEP_AREA_BYTES = 64 * 1024 * 1024
# Header slots decoded with whole-array operations; records with more headers than this finish
# in a per-header Python loop (bounds the numpy calls a hostile record can cause).
_VECTOR_HEADER_SLOTS = 16


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """Per-batch metadata of every complete batch in the buffer, in buffer order.

    Includes batches that produced no rows (control batches, batches outside the offset range):
    ``read_committed`` needs every abort marker.
    """

    base_offsets: Int64Array
    last_offsets: Int64Array
    producer_ids: Int64Array
    producer_epochs: npt.NDArray[np.int16]
    is_transactional: BoolArray
    is_control: BoolArray
    control_types: npt.NDArray[np.int16]  # the marker's type (0 ABORT, 1 COMMIT), -1 for data

    def __len__(self) -> int:
        return len(self.base_offsets)


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The records of one partition's fetch buffer, as columns (one row per data record).

    ``next_offset`` is the offset to fetch next: the last complete batch's last offset + 1 (at
    least ``start_offset`` when one was given), None when no batch was complete.
    ``bytes_consumed`` is where the complete batches end; ``has_partial_batch`` says whether
    bytes after that begin a batch the broker cut short. ``error`` is the malformed batch that
    ended decoding early (``on_corrupt="truncate"`` only): raise it once these rows are used.
    """

    offsets: Int64Array
    timestamps_ms: Int64Array
    timestamp_types: npt.NDArray[np.int32]
    keys: pa.BinaryArray
    values: pa.BinaryArray
    headers: pa.ListArray | None
    batch_index: npt.NDArray[np.int32]  # row -> index into ``batches``
    batches: BatchColumns
    next_offset: int | None
    bytes_consumed: int
    has_partial_batch: bool
    error: DecodeError | None = None  # set only by on_corrupt="truncate"

    def __len__(self) -> int:
        return len(self.offsets)

    def filter(self, keep: BoolArray) -> RecordColumns:
        """The rows where ``keep`` is True (batch metadata and bookkeeping unchanged)."""
        mask = pa.array(keep, type=pa.bool_())
        return replace(
            self, offsets=self.offsets[keep], timestamps_ms=self.timestamps_ms[keep],
            timestamp_types=self.timestamp_types[keep], keys=self.keys.filter(mask),
            values=self.values.filter(mask),
            headers=None if self.headers is None else self.headers.filter(mask),
            batch_index=self.batch_index[keep],
        )


def decode_columns(
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
    area: DecodeArea | None = None,
) -> RecordColumns:
    """Decode the batches of one partition's fetch buffer into ``RecordColumns``.

    Parameters
    ----------
    buf
        The ``records`` bytes of one partition in a Fetch response.
    start_offset, end_offset
        Rows have ``start_offset <= offset < end_offset`` (either bound optional): a compressed
        batch may begin before the offset that was fetched.
    include_headers
        Decode record headers into ``headers`` (a null list for records without headers).
    max_decompressed_bytes
        Cap on the decompressed bytes of all batches of this call together, v2 batches and
        legacy wrappers alike.
    budget
        A wider budget charged with the same bytes: the fetcher's for the whole response, so
        that many partitions cannot add up to an unbounded total either.
    area
        Where compressed batches are decompressed: pass the same one to every call of a
        thread (never to two calls at once) so that its memory is reused. The returned columns
        never refer to it.
    topic, partition
        Named in error messages.
    on_corrupt
        ``"raise"`` (default) raises at the first malformed batch. ``"truncate"`` stops there
        instead and returns the batches before it, with the exception in ``error`` (what the
        Java consumer does: hand out the good records, then fail). Only faults found by the
        batch walk (framing, magic, CRC, decompression) truncate; a batch whose CRC holds but
        whose records do not parse still raises.

    Raises
    ------
    DecodeError
        Malformed bytes; ``CorruptRecordError`` for a CRC mismatch.
    """
    scanned = scan_buffer(
        buf, start_offset=start_offset, end_offset=end_offset, include_headers=include_headers,
        max_decompressed_bytes=max_decompressed_bytes, topic=topic, partition=partition,
        verify_crc=verify_crc, on_corrupt=on_corrupt, budget=budget,
        area=area if area is not None else DecodeArea())
    return scanned if isinstance(scanned, RecordColumns) else finish_columns(scanned)


@dataclass(frozen=True, slots=True)
class ScannedBuffer:
    """A buffer after step 1 (batch headers walked, CRCs checked, batches decompressed into
    ``area``), waiting for steps 2-4 (``finish_columns``).

    The split lets a decode thread do step 1, which is nearly all GIL-free C (CRC-32C, lz4,
    zstd), while another thread runs the Python-bound steps 2-4 of the previous buffer. The
    ``area`` belongs to this buffer until ``finish_columns`` returns.
    """

    scan: _Scan
    area: DecodeArea
    start_offset: int | None
    end_offset: int | None
    include_headers: bool
    where: str


def scan_buffer(
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
    area: DecodeArea,
) -> ScannedBuffer | RecordColumns:
    """Step 1 of ``decode_columns`` (same parameters): a ``ScannedBuffer`` for
    ``finish_columns``, or the finished columns when the buffer holds a legacy message set
    (decoded record by record, rare). ``area`` is released (empty) when the columns are
    returned here, else it is the ``ScannedBuffer``'s until it is finished.
    """
    where = _describe(topic, partition)
    if on_corrupt not in ("raise", "truncate"):
        raise ValueError(f"on_corrupt must be 'raise' or 'truncate', not {on_corrupt!r}")
    area.used = 0
    area.size_hint = 2 * len(buf)  # compressed batches inflate; grow once, not many times
    scan = _scan(buf, start_offset, end_offset, verify_crc,
                 DecompressionBudget(max_decompressed_bytes, parent=budget), where,
                 on_corrupt == "truncate", area)
    if scan is not None:
        return ScannedBuffer(scan, area, start_offset, end_offset, include_headers, where)
    from kafka_ds.protocol.record_columns_legacy import decode_columns_per_record

    area.release()
    # The per-record path starts again from the first batch with a fresh partition budget;
    # what the v2 walk decompressed before it met the legacy set stays charged to the
    # response budget, which only errs on the safe side.
    return decode_columns_per_record(
        buf, start_offset=start_offset, end_offset=end_offset,
        include_headers=include_headers, max_decompressed_bytes=max_decompressed_bytes,
        topic=topic, partition=partition, verify_crc=verify_crc, on_corrupt=on_corrupt,
        budget=budget)


def finish_columns(scanned: ScannedBuffer) -> RecordColumns:
    """Steps 2-4 of ``decode_columns``: the rows of a scanned buffer; releases its area."""
    scan = scanned.scan
    last_offsets = scan.batches.last_offsets
    next_offset = int(last_offsets[-1]) + 1 if len(last_offsets) else None
    if next_offset is not None and scanned.start_offset is not None:
        next_offset = max(next_offset, scanned.start_offset)
    where = scanned.where
    if scan.area is not scan.buf:  # error positions then count in the decompressed copy
        where += " (position in the decompressed records)"
    try:
        offsets, timestamps, types, keys, values, headers, batch_index = _decode_rows(
            scan.area, scan.sections, scan.meta, scanned.start_offset, scanned.end_offset,
            scanned.include_headers, where)
    finally:
        # Every column is a copy (Arrow ``take``, numpy arithmetic): the area may be reused.
        scanned.area.release()
    return RecordColumns(offsets, timestamps, types, keys, values, headers, batch_index,
                         scan.batches, next_offset, scan.bytes_consumed, scan.has_partial_batch,
                         scan.error)


# --- step 1: batch headers -----------------------------------------------------------------

class DecodeArea:
    """Decompressed records sections of one ``decode_columns`` call, end to end, in a buffer
    kept for the next call.

    A fresh multi-MiB buffer per response costs a page fault per 4 KiB on first touch, which
    measured as much CPU as decoding 1 KB records; a buffer kept from the previous call is
    already mapped. Not thread-safe: one per thread.
    """

    __slots__ = ("buf", "size_hint", "used")

    def __init__(self) -> None:
        # numpy rather than bytearray: growing it does not zero-fill (touch) the new memory.
        self.buf: npt.NDArray[np.uint8] = np.empty(0, dtype=np.uint8)
        self.used = 0
        self.size_hint = 0  # what this call will probably need in all (its first growth)

    def reserve(self, size: int) -> memoryview:
        """Room for ``size`` more bytes after what is used; grows (by copying) when short."""
        need = self.used + size
        if need > len(self.buf):
            grown = np.empty(max(need, 2 * len(self.buf), self.size_hint), dtype=np.uint8)
            grown[:self.used] = self.buf[:self.used]
            self.buf = grown
        return self.buf[self.used:need].data

    def decompress(self, budget: DecompressionBudget, codec: int,
                   data: Buffer) -> tuple[int, int]:
        """Append ``data`` decompressed; its (start, end) in the area."""
        start = self.used
        self.used += budget.decompress_into(codec, data, self.reserve)
        return start, self.used

    def view(self) -> memoryview:
        return self.buf[:self.used].data

    def release(self) -> None:
        """The call is done with it (its columns are copies)."""
        self.used = 0
        if len(self.buf) > _KEEP_AREA_BYTES:
            self.buf = np.empty(0, dtype=np.uint8)


# A records section to decode: (start, end, record count, batch index) within the area.
_Section = tuple[int, int, int, int]


@dataclass(slots=True)
class _Scan:
    """What the header walk found (step 1)."""

    batches: BatchColumns
    # Per records section: base offset, base timestamp, max timestamp, LogAppendTime flag and
    # batch index of its batch.
    meta: list[tuple[int, int, int, int, int]]
    buf: Buffer  # the fetch buffer
    area: Buffer  # the records sections, end to end (or the fetch buffer itself)
    sections: list[_Section]
    bytes_consumed: int
    has_partial_batch: bool
    error: DecodeError | None


def _scan(buf: Buffer, start_offset: int | None, end_offset: int | None, verify_crc: bool,
          budget: DecompressionBudget, where: str, truncate: bool,
          area: DecodeArea) -> _Scan | None:
    """Walk the batch headers; returns None when a legacy message set is present.

    With ``truncate``, a malformed batch ends the walk and is reported in ``error`` instead of
    raising, so that the batches before it can still be returned.
    """
    size = len(buf)
    view = memoryview(buf)
    unpack_header = HEADER_STRUCT.unpack_from
    crc32c = _crc32c.crc32c
    low = -(2**63) if start_offset is None else start_offset
    high = 2**63 - 1 if end_offset is None else end_offset
    columns: list[list[int]] = [[], [], [], [], [], [], []]
    base_offsets, last_offsets, producer_ids, epochs, txn, control, control_types = columns
    meta: list[tuple[int, int, int, int, int]] = []
    # Records sections: (in ``area``, or else in the fetch buffer; start; end; count).
    found: list[tuple[bool, int, int, int]] = []
    pos = 0
    partial = False
    error = None
    while True:
        remaining = size - pos
        if remaining < LOG_OVERHEAD:
            partial = remaining > 0
            break
        try:
            base_offset, length = _LOG_HEADER.unpack_from(buf, pos)
            magic = buf[pos + MAGIC_OFFSET] if remaining > MAGIC_OFFSET else None
            # Every format has its magic byte inside the length; v2 needs a whole header.
            if length <= MAGIC_OFFSET - LOG_OVERHEAD or (magic == MAGIC_V2
                                                         and length < MIN_BATCH_LENGTH):
                raise DecodeError(f"batch length{where}", pos + LENGTH_OFFSET,
                                  f"{length} is too small for the batch at offset {base_offset}")
            end = pos + LOG_OVERHEAD + length
            if end > size:
                partial = True
                break
            if magic != MAGIC_V2:
                if magic in (0, 1):
                    return None
                raise DecodeError(f"batch magic{where}", pos + MAGIC_OFFSET,
                                  f"unknown magic {magic} in the batch at offset {base_offset}")
            (_, _, _, _, crc, attributes, last_delta, base_timestamp, max_timestamp,
             producer_id, producer_epoch, _, count) = unpack_header(buf, pos)
            if verify_crc and crc32c(view[pos + ATTRIBUTES_OFFSET:end]) != crc:
                raise CorruptRecordError(
                    f"record batch at offset {base_offset}{where}", pos + CRC_OFFSET,
                    f"CRC-32C mismatch (the batch says {crc:#010x})")
            last_offset = base_offset + last_delta
            control_type = -1
            section: tuple[bool, int, int, int] | None = None
            if attributes & CONTROL_BIT:
                header = RecordBatchHeader._make(unpack_header(buf, pos))
                marker = RecordBatch(header, buf, pos, budget, where).control_record()
                control_type = -1 if marker is None else marker.type
            elif count and last_offset >= low and base_offset < high:
                if count < 0:
                    raise DecodeError(f"record count{where}", pos + HEADER_BYTES - 4,
                                      f"{count} in the batch at offset {base_offset}")
                codec = attributes & COMPRESSION_MASK
                if codec:
                    try:
                        data_start, data_end = area.decompress(budget, codec,
                                                               view[pos + HEADER_BYTES:end])
                    except DecodeError as exc:
                        raise DecodeError(f"records of the batch at offset {base_offset}{where}",
                                          pos + HEADER_BYTES, str(exc)) from None
                    section = (True, data_start, data_end, count)
                else:
                    section = (False, pos + HEADER_BYTES, end, count)
        except DecodeError as exc:
            if not truncate:
                raise
            error = exc
            break
        index = len(base_offsets)
        base_offsets.append(base_offset)
        last_offsets.append(last_offset)
        producer_ids.append(producer_id)
        epochs.append(producer_epoch)
        txn.append(attributes & TRANSACTIONAL_BIT)
        control.append(attributes & CONTROL_BIT)
        control_types.append(control_type)
        if section is not None:
            found.append(section)
            meta.append((base_offset, base_timestamp, max_timestamp,
                         attributes & TIMESTAMP_TYPE_BIT, index))
        pos = end
    batches = BatchColumns(
        np.array(base_offsets, dtype=np.int64), np.array(last_offsets, dtype=np.int64),
        np.array(producer_ids, dtype=np.int64), np.array(epochs, dtype=np.int16),
        np.array(txn, dtype=bool), np.array(control, dtype=bool),
        np.array(control_types, dtype=np.int16))
    records: Buffer = buf
    sections = [(start, stop, count, index) for index, (_, start, stop, count)
                in enumerate(found)]
    in_area = [inside for inside, _, _, _ in found]
    if all(in_area) and found:  # decompressed in place, already end to end
        records = area.view()
    elif any(in_area):  # compressed and plain batches mixed: lay them end to end
        decompressed = area.view()
        records = b"".join([decompressed[start:stop] if inside else view[start:stop]
                            for inside, start, stop, _ in found])
        sections = []
        at = 0
        for index, (_, start, stop, count) in enumerate(found):
            sections.append((at, at + stop - start, count, index))
            at += stop - start
    if len(records) > _MAX_AREA_BYTES and sections:
        raise DecodeError(f"records{where}", None,
                          f"{len(records)} bytes of records exceed what one Arrow column holds")
    return _Scan(batches, meta, buf, records, sections, pos, partial, error)


# --- step 2: where each record starts ------------------------------------------------------

# Bytes a record occupies, read from the first byte b of its length varint: for a one-byte
# varint 1 + length; for a two-byte one, 2 + the low 6 length bits in b, and the second byte
# adds ``second << 6``. (Zigzag: length = varint >> 1; record lengths are never negative.)
_STEP = [1 + (b >> 1) if b < 0x80 else 2 + ((b & 0x7F) >> 1) for b in range(256)]


def _record_starts(area: Buffer, sections: list[_Section], where: str,
                   exact: bool = False) -> Int64Array:
    """Follow the record length varints through every section: the one per-record loop.

    The fast loop assumes lengths of one or two varint bytes and does not look at the sign;
    the caller checks every step against a full vectorised decode of the same varints and
    reruns with ``exact=True`` (per-record ``read_varint``) when they disagree, so the fast loop
    never decides anything alone. A section whose fast walk does not land on its end is redone
    exactly at once (records of 8 KiB or more have three-byte lengths).
    """
    starts: list[int] = []
    append = starts.append
    step = _STEP
    for start, stop, count, _ in sections:
        if count * MIN_RECORD_BYTES > stop - start:
            raise DecodeError(f"record count{where}", start,
                              f"{count} records cannot fit in {stop - start} bytes")
        mark = len(starts)
        pos = start
        if not exact:
            try:
                for _ in range(count):
                    append(pos)
                    byte = area[pos]
                    if byte < 0x80:
                        pos += step[byte]
                    else:
                        pos += step[byte] + (area[pos + 1] << 6)
            except IndexError:
                pos = -1
            if pos == stop:
                continue
            del starts[mark:]
            pos = start
        for _ in range(count):
            append(pos)
            length, pos = read_varint(area, pos)
            if length < 0:
                raise DecodeError(f"record length{where}", pos, f"negative length {length}")
            pos += length
        if pos != stop:
            raise DecodeError(f"records{where}", min(pos, stop),
                              f"records end at {pos}, their batch section at {stop}")
    return np.array(starts, dtype=np.int64)


def _record_bounds(data: npt.NDArray[np.uint8], area: Buffer, sections: list[_Section],
                   where: str) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Every record's start, body start (after the length) and end, cross-checked."""
    stops = np.array([section[1] for section in sections], dtype=np.int64)
    last_rows = np.cumsum([section[2] for section in sections]) - 1
    for exact in (False, True):
        starts = _record_starts(area, sections, where, exact)
        lengths, body = decode_varints(data, starts, 5, f"record length{where}")
        record_end = body + lengths
        # Each record must end where the next one starts, the last where its section ends.
        expected = np.empty_like(starts)
        expected[:-1] = starts[1:]
        expected[last_rows] = stops
        if (record_end == expected).all() and (lengths >= 0).all():
            return starts, body, record_end
    _check(record_end == expected, starts, "record length", "inconsistent record lengths", where)
    raise AssertionError("unreachable: the exact walk validates every length")


# --- steps 3 and 4: fields, keys, values, headers ------------------------------------------

_Rows = tuple[Int64Array, Int64Array, npt.NDArray[np.int32], pa.BinaryArray, pa.BinaryArray,
              pa.ListArray | None, npt.NDArray[np.int32]]


def _decode_rows(area: Buffer, sections: list[_Section],
                 meta: list[tuple[int, int, int, int, int]],
                 start_offset: int | None, end_offset: int | None, include_headers: bool,
                 where: str) -> _Rows:
    if not sections:
        return _empty_rows(include_headers)
    data = np.frombuffer(area, dtype=np.uint8)
    starts, body, record_end = _record_bounds(data, area, sections, where)
    counts = np.array([section[2] for section in sections], dtype=np.int64)
    meta_rows = np.repeat(np.array([section[3] for section in sections]), counts)
    batch_meta = np.array(meta, dtype=np.int64)
    timestamp_delta, pos = decode_varints(data, body + 1, 10, f"record timestamp{where}")
    offset_delta, pos = decode_varints(data, pos, 5, f"record offset delta{where}")
    offsets = batch_meta[:, 0][meta_rows] + offset_delta
    if start_offset is not None or end_offset is not None:
        keep = np.ones(len(offsets), dtype=bool)
        if start_offset is not None:
            keep &= offsets >= start_offset
        if end_offset is not None:
            keep &= offsets < end_offset
        if not keep.all():
            starts, record_end, timestamp_delta, offsets, meta_rows, pos = (
                starts[keep], record_end[keep], timestamp_delta[keep], offsets[keep],
                meta_rows[keep], pos[keep])
            if not len(offsets):
                return _empty_rows(include_headers)

    key_length, key_start = decode_varints(data, pos, 5, f"record key length{where}")
    key_end = key_start + np.maximum(key_length, 0)
    value_length, value_start = decode_varints(data, key_end, 5, f"record value length{where}")
    value_end = value_start + np.maximum(value_length, 0)
    header_count, pos = decode_varints(data, value_end, 5, f"record headers count{where}")
    # Each header takes at least two bytes (key and value lengths).
    valid = ((key_length >= -1) & (value_length >= -1) & (header_count >= 0)
             & (header_count * 2 <= record_end - pos))
    _check(valid, starts, "record", "invalid key, value or header length", where)
    header_list = None
    if include_headers:
        header_list, pos = _decode_headers(data, area, pos, header_count, record_end, where)
        _check(pos == record_end, starts, "record headers", "headers overrun the record", where)
    else:
        # Headers are skipped, not parsed: only check that the fields before them fit.
        fits = np.where(header_count == 0, pos == record_end, pos < record_end)
        _check(fits, starts, "record", "fields overrun the record length", where)

    buffer = pa.py_buffer(area)
    keys, values = take_pairs(buffer, key_start, key_end, value_start, value_end)
    keys = with_validity(keys, key_length >= 0)
    values = with_validity(values, value_length >= 0)

    log_append = batch_meta[:, 3][meta_rows] != 0
    timestamps = batch_meta[:, 1][meta_rows] + timestamp_delta
    if log_append.any():
        timestamps = np.where(log_append, batch_meta[:, 2][meta_rows], timestamps)
    types = log_append.astype(np.int32)
    batch_index = batch_meta[:, 4][meta_rows].astype(np.int32)
    return offsets, timestamps, types, keys, values, header_list, batch_index


def _check(valid: BoolArray, starts: Int64Array, what: str, detail: str, where: str) -> None:
    if not valid.all():
        row = int(np.argmin(valid))
        raise DecodeError(f"{what}{where}", int(starts[row]), detail)


def _empty_rows(include_headers: bool) -> _Rows:
    empty = np.zeros(0, dtype=np.int64)
    return (empty, empty.copy(), np.zeros(0, dtype=np.int32), pa.array([], pa.binary()),
            pa.array([], pa.binary()), pa.array([], HEADERS_TYPE) if include_headers else None,
            np.zeros(0, dtype=np.int32))


def _decode_headers(data: npt.NDArray[np.uint8], area: Buffer, pos: Int64Array,
                    header_count: Int64Array, record_end: Int64Array,
                    where: str) -> tuple[pa.ListArray, Int64Array]:
    """Decode every record's headers, one header slot at a time across all records."""
    rows = len(pos)
    list_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(header_count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    key_start = np.empty(total, dtype=np.int64)
    key_end = np.empty(total, dtype=np.int64)
    value_start = np.empty(total, dtype=np.int64)
    value_end = np.empty(total, dtype=np.int64)
    value_valid = np.empty(total, dtype=bool)
    pos = pos.copy()
    active = np.flatnonzero(header_count)
    slot = 0
    while len(active) and slot < _VECTOR_HEADER_SLOTS:
        flat = list_offsets[active] + slot
        key_length, start = decode_varints(data, pos[active], 5, f"header key length{where}")
        _check(key_length >= 0, pos[active], "header key", "null or negative length", where)
        key_start[flat] = start
        key_end[flat] = stop = start + key_length
        value_length, start = decode_varints(data, stop, 5, f"header value length{where}")
        _check(value_length >= -1, pos[active], "header value", "negative length", where)
        value_start[flat] = start
        value_end[flat] = stop = start + np.maximum(value_length, 0)
        value_valid[flat] = value_length >= 0
        # Stop at the record end so that a bad length cannot run later slots off the buffer.
        pos[active] = np.minimum(stop, record_end[active] + 1)
        slot += 1
        active = active[header_count[active] > slot]
    for row in active.tolist():  # records with very many headers: finish them one by one
        at = int(pos[row])
        end = int(record_end[row])
        for index in range(int(list_offsets[row]) + slot, int(list_offsets[row + 1])):
            key_size, at = read_varint(area, at)
            value_size, value_at = read_varint(area, at + max(key_size, 0))
            if key_size < 0 or value_size < -1 or value_at > end:
                raise DecodeError(f"record header{where}", at, "invalid header length")
            key_start[index], key_end[index] = at, at + key_size
            value_start[index] = value_at
            value_end[index] = at = value_at + max(value_size, 0)
            value_valid[index] = value_size >= 0
            if at > end:
                raise DecodeError(f"record header{where}", at, "header overruns the record")
        pos[row] = at
    if (pos != record_end).any():  # validate before building arrays over these offsets
        return pa.array([], HEADERS_TYPE), pos
    keys, values = take_pairs(pa.py_buffer(area), key_start, key_end, value_start, value_end)
    names = pa.Array.from_buffers(pa.string(), total, [None, *keys.buffers()[1:]])
    try:
        names.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: replace bad bytes, as Java's String decoding does
        names = pa.array([raw.decode("utf-8", "replace") for raw in keys.to_pylist()],
                         pa.string())
    struct_values = pa.StructArray.from_arrays(
        [names, with_validity(values, value_valid)], fields=list(HEADER_STRUCT_TYPE))
    header_list = pa.ListArray.from_arrays(
        pa.array(list_offsets.astype(np.int32)), struct_values, type=HEADERS_TYPE,
        mask=pa.array(header_count == 0))
    return header_list, pos

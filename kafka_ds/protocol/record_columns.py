"""Decode a whole fetch buffer into columns, with no Python object per record.

Layer: protocol (sans-IO). Imports pyarrow and this package's ``record_columns_*`` modules,
which hold the steps: ``record_columns_scan`` (step 1), ``record_columns_rows`` (steps 2-4),
``record_columns_types`` (the results). The format is described in ``records``; this
module decodes the same bytes as ``records.decode_records`` and must agree with it record for
record (tests compare the two on random batches).

How, for one partition's ``records`` bytes (many batches, some compressed):

1. One Python loop over batch headers: one ``unpack_from`` of the 61-byte header and one
   CRC-32C per batch. Batches wholly outside ``[start_offset, end_offset)`` are checked but not
   decompressed; compressed batches are decompressed (under the size cap).
2. The records sections are laid end to end in one buffer (the fetch buffer itself when nothing
   was compressed, else the decompressed sections, written in place into a ``DecodeArea`` the
   caller may keep from one call to the next). A thin Python loop follows each record's
   length varint to find where every record starts (the only step that is sequential by
   nature; step 1 already did it for compressed batches, each right after decompressing it),
   in one batch of each shape (record count, bytes); batches of the same shape are guessed
   to be laid out alike, and every guessed start is checked.
3. numpy decodes every other field of every record at once (``varint_arrays``), checks that each
   record's fields end exactly where its length says, and drops rows outside the offset range.
4. Keys and values are copied out of the buffer into exactly sized Arrow buffers
   (``record_arrow.gather``). Headers are gathered with Arrow ``take``, one header slot at a
   time.

Control batches never produce rows; their marker type is kept per batch for ``read_committed``.
Buffers holding legacy (magic 0/1) message sets take a per-record path with the same output.
``record_arrow.to_arrow`` (re-exported here) shapes the result as Spark's Kafka source schema.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.record_arrow import (
    HEADERS_TYPE,
    SPARK_SCHEMA,
    SPARK_SCHEMA_WITH_HEADERS,
    to_arrow,
)
from kafka_ds.protocol.record_columns_rows import decode_rows
from kafka_ds.protocol.record_columns_scan import DecodeArea, Scan, scan_batches
from kafka_ds.protocol.record_columns_types import BatchColumns, RecordColumns
from kafka_ds.protocol.records import DEFAULT_MAX_DECOMPRESSED_BYTES, Buffer, _describe

__all__ = ["HEADERS_TYPE", "SPARK_SCHEMA", "SPARK_SCHEMA_WITH_HEADERS", "BatchColumns",
           "DecodeArea", "DecodeOptions", "RecordColumns", "ScannedBuffer", "decode_columns",
           "finish_columns", "scan_buffer", "to_arrow"]


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """What to decode from one partition's fetch buffer (see ``decode_columns``)."""

    start_offset: int | None = None
    end_offset: int | None = None
    include_headers: bool = False
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    topic: str | None = None
    partition: int | None = None
    verify_crc: bool = True
    on_corrupt: str = "raise"

    def __post_init__(self) -> None:
        if self.on_corrupt not in ("raise", "truncate"):
            raise ValueError(f"on_corrupt must be 'raise' or 'truncate', not {self.on_corrupt!r}")


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
    options = DecodeOptions(start_offset, end_offset, include_headers, max_decompressed_bytes,
                            topic, partition, verify_crc, on_corrupt)
    scanned = scan_buffer(buf, options, budget=budget,
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

    scan: Scan
    area: DecodeArea
    options: DecodeOptions
    where: str


def scan_buffer(buf: Buffer, options: DecodeOptions, *, area: DecodeArea,
                budget: DecompressionBudget | None = None,
                walk_records: bool = True) -> ScannedBuffer | RecordColumns:
    """Step 1 of ``decode_columns`` (same parameters): a ``ScannedBuffer`` for
    ``finish_columns``, or the finished columns when the buffer holds a legacy message set
    (decoded record by record, rare). ``area`` is released (empty) when the columns are
    returned here, else it is the ``ScannedBuffer``'s until it is finished.

    ``walk_records`` also finds where each compressed batch's records start right after it is
    decompressed, while they are in the CPU cache (``record_walk``); pass False where step 1
    runs in another thread, as the walk is Python and holds the GIL.
    """
    where = _describe(options.topic, options.partition)
    area.used = 0
    area.size_hint = 2 * len(buf)  # compressed batches inflate; grow once, not many times
    scan = scan_batches(buf, options.start_offset, options.end_offset, options.verify_crc,
                        DecompressionBudget(options.max_decompressed_bytes, parent=budget), where,
                        options.on_corrupt == "truncate", area, walk_records)
    if scan is not None:
        return ScannedBuffer(scan, area, options, where)
    from kafka_ds.protocol.record_columns_legacy import decode_columns_per_record

    area.release()
    # The per-record path starts again from the first batch with a fresh partition budget;
    # what the v2 walk decompressed before it met the legacy set stays charged to the
    # response budget, which only errs on the safe side.
    return decode_columns_per_record(buf, **asdict(options), budget=budget)


def finish_columns(scanned: ScannedBuffer) -> RecordColumns:
    """Steps 2-4 of ``decode_columns``: the rows of a scanned buffer; releases its area."""
    scan = scanned.scan
    options = scanned.options
    last_offsets = scan.batches.last_offsets
    next_offset = int(last_offsets[-1]) + 1 if len(last_offsets) else None
    if next_offset is not None and options.start_offset is not None:
        next_offset = max(next_offset, options.start_offset)
    where = scanned.where
    if scan.area is not scan.buf:  # error positions then count in the decompressed copy
        where += " (position in the decompressed records)"
    try:
        offsets, timestamps, types, keys, values, headers, batch_index = decode_rows(
            scan.area, scan.sections, scan.layouts, scan.meta, options.start_offset,
            options.end_offset, options.include_headers, where)
    finally:
        # Every column is a copy (``gather``, ``take``, numpy arithmetic): the area may be reused.
        scanned.area.release()
    return RecordColumns(offsets, timestamps, types, keys, values, headers, batch_index,
                         scan.batches, next_offset, scan.bytes_consumed, scan.has_partial_batch,
                         scan.error)

"""Step 1 of decoding a fetch buffer: walk the batch headers, check CRCs, decompress.

Layer: protocol (sans-IO). Imports numpy, ``crc32c`` and this package's ``records``,
``decompression_budget``, ``record_columns_types`` and ``record_walk``. One Python loop over
batch headers: one ``unpack_from`` of the 61-byte header and one CRC-32C per batch. Batches
wholly outside the offset range are checked but not decompressed; compressed batches are
decompressed (under the size cap) end to end into a ``DecodeArea`` the caller may keep from one
call to the next, and their records walked at once, while in cache (``record_walk``; skipped
for a scan in another thread). The result (``Scan``) names the records sections that
``record_columns_rows`` turns into rows. Nearly all of this step is GIL-free C (CRC-32C, lz4,
zstd), the walk aside.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c
import numpy as np
import numpy.typing as npt

from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import CorruptRecordError, DecodeError
from kafka_ds.protocol.record_columns_types import BatchColumns
from kafka_ds.protocol.record_walk import walk_fast
from kafka_ds.protocol.records import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_OFFSET,
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
)

# Arrow binary arrays use int32 offsets: the joined records buffer must stay below 2 GiB.
_MAX_AREA_BYTES = 2**31 - 1
_LOG_HEADER = struct.Struct(">qi")
# A DecodeArea keeps its buffer between calls up to this size (a larger one, from an unusually
# large response, is let go after use).
_KEEP_AREA_BYTES = 64 * 1024 * 1024


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
Section = tuple[int, int, int, int]


@dataclass(slots=True)
class Layouts:
    """Where the records of each section start, as far as the scan walked them.

    The scan walks each compressed batch just after decompressing it, while its records are
    still in the CPU cache (``record_walk``), and only one batch of each shape (record count,
    bytes); ``record_columns_rows`` walks what is left (uncompressed batches: walking them here
    measured no faster, their bytes stay in cache from the receive) and checks every start.
    """

    # The walked sections' record starts, each relative to its section's start, end to end.
    relative_starts: list[int]
    # Per section: the index in ``relative_starts`` of its first record's start (that of the
    # first section of its shape), or -1 when not walked (left to ``record_columns_rows``).
    layout_at: list[int]


@dataclass(slots=True)
class Scan:
    """What the header walk found (step 1)."""

    batches: BatchColumns
    # Per records section: base offset, base timestamp, max timestamp, LogAppendTime flag and
    # batch index of its batch.
    meta: list[tuple[int, int, int, int, int]]
    buf: Buffer  # the fetch buffer
    area: Buffer  # the records sections, end to end (or the fetch buffer itself)
    sections: list[Section]
    layouts: Layouts
    bytes_consumed: int
    has_partial_batch: bool
    error: DecodeError | None


def scan_batches(buf: Buffer, start_offset: int | None, end_offset: int | None, verify_crc: bool,
          budget: DecompressionBudget, where: str, truncate: bool,
          area: DecodeArea, walk_records: bool = True) -> Scan | None:
    """Walk the batch headers; returns None when a legacy message set is present.

    With ``truncate``, a malformed batch ends the walk and is reported in ``error`` instead of
    raising, so that the batches before it can still be returned. With ``walk_records``, each
    compressed batch's records are walked too (``Layouts``): a Python loop, so a scan meant to
    run GIL-free in another thread passes False and leaves the walk to ``record_columns_rows``.
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
    layouts = Layouts([], [])
    shapes: dict[tuple[int, int], int] = {}
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
            inside, start, stop, _ = section
            layouts.layout_at.append(
                _walk(area.buf[start:stop].data, count, shapes, layouts.relative_starts)
                if walk_records and inside else -1)
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
    return Scan(batches, meta, buf, records, sections, layouts, pos, partial, error)


def _walk(records: memoryview, count: int, shapes: dict[tuple[int, int], int],
          relative_starts: list[int]) -> int:
    """Walk one section's records (``record_walk.walk_fast``) unless one of its shape was
    walked already; the index of its layout in ``relative_starts``, or -1 when the fast walk
    did not fit the section (``record_columns_rows`` then walks it exactly, naming a fault)."""
    shape = (count, len(records))
    at = shapes.get(shape)
    if at is None:
        at = -1
        if count * MIN_RECORD_BYTES <= len(records):
            mark = len(relative_starts)
            if walk_fast(records, 0, count, relative_starts) == len(records):
                at = mark
            else:
                del relative_starts[mark:]
        shapes[shape] = at
    return at


"""Steps 2-4 of decoding a fetch buffer: the rows of the scanned records sections.

Layer: protocol (sans-IO). Imports numpy, pyarrow and this package's ``varint_arrays``,
``record_arrow``, ``arrow_numpy``, ``record_walk`` and ``record_columns_scan`` (for its
types). Given the records sections laid end to end (``record_columns_scan``):

2. Find where every record starts by following the record length varints (the only step that
   is sequential by nature; compressed batches were walked as they were decompressed).
3. numpy decodes every other field of every record at once (``varint_arrays``), checks that each
   record's fields end exactly where its length says, and drops rows outside the offset range.
4. Keys and values are gathered into exactly sized buffers (``record_arrow.gather``). Headers
   are gathered by Arrow (``record_arrow.take_pairs``), one header slot at a time.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kafka_ds.protocol.arrow_numpy import binary_from_list, from_mask, from_numpy
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.primitives import read_varint
from kafka_ds.protocol.record_arrow import (
    HEADER_STRUCT_TYPE,
    HEADERS_TYPE,
    gather,
    take_pairs,
    with_validity,
)
from kafka_ds.protocol.record_columns_scan import Layouts, Section
from kafka_ds.protocol.record_columns_types import BoolArray, Int64Array
from kafka_ds.protocol.record_walk import walk_fast
from kafka_ds.protocol.records import MIN_RECORD_BYTES, Buffer
from kafka_ds.protocol.varint_arrays import decode_varints

# Header slots decoded with whole-array operations; records with more headers than this finish
# in a per-header Python loop (bounds the numpy calls a hostile record can cause).
_VECTOR_HEADER_SLOTS = 16


# --- step 2: where each record starts ------------------------------------------------------

def _section_starts(area: Buffer, section: Section, where: str, exact: bool,
                    starts: list[int]) -> None:
    """Append where each record of ``section`` starts, following the record length varints.

    The fast walk (``record_walk.walk_fast``) is tried first unless ``exact``; a section where
    it does not land on its end is redone with per-record ``read_varint``, which names the
    fault. The caller checks every step against a full vectorised decode of the same varints
    and reruns with ``exact=True`` when they disagree, so the fast walk never decides alone.
    """
    start, stop, count, _ = section
    if count * MIN_RECORD_BYTES > stop - start:
        raise DecodeError(f"record count{where}", start,
                          f"{count} records cannot fit in {stop - start} bytes")
    mark = len(starts)
    if not exact:
        if walk_fast(area, start, count, starts) == stop:
            return
        del starts[mark:]
    append = starts.append
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


def _record_starts(area: Buffer, sections: list[Section], where: str,
                   exact: bool = False) -> Int64Array:
    """Where every record of every section starts, walked record by record."""
    starts: list[int] = []
    for section in sections:
        _section_starts(area, section, where, exact, starts)
    return np.array(starts, dtype=np.int64)


def _scanned_starts(area: Buffer, sections: list[Section], layouts: Layouts,
                    where: str) -> Int64Array:
    """Where every record starts: from the layouts the scan walked (``Layouts``), the sections
    it left unwalked walked here, one of each shape (record count, bytes), the others of that
    shape guessed to lay their records out the same way.

    A producer's batches are often alike: same record count, same byte length, and then
    nearly always the same record sizes (fixed-size values; offset and timestamp deltas that
    grow alike in each batch). The guess is only a guess: the caller checks every record's
    length against the next start and walks a section record by record when one disagrees.
    """
    layout_at = list(layouts.layout_at)
    found = len(layouts.relative_starts)  # where the next walked layout will start
    shapes: dict[tuple[int, int], int] = {}
    # The sections walked here, end to end: their records' starts in the area, and each
    # section's start and count, made relative below in one numpy step (one array per
    # section cost about 1 us each: a seventh of decoding 1 KB records in 16 KiB batches).
    walked: list[int] = []
    walked_from: list[int] = []
    walked_counts: list[int] = []
    for index, at in enumerate(layout_at):
        if at >= 0:
            continue
        start, stop, count, _ = sections[index]
        at = shapes.get((count, stop - start), -1)
        if at < 0:
            _section_starts(area, sections[index], where, False, walked)
            walked_from.append(start)
            walked_counts.append(count)
            at = shapes[count, stop - start] = found
            found += count
        layout_at[index] = at
    counts = np.array([section[2] for section in sections], dtype=np.int64)
    firsts = np.cumsum(counts) - counts  # each section's first row
    offset_rows = np.repeat(np.array([section[0] for section in sections], dtype=np.int64),
                            counts)
    layout = np.array(layouts.relative_starts, dtype=np.int64)
    if walked:
        here = np.array(walked, dtype=np.int64) - np.repeat(
            np.array(walked_from, dtype=np.int64), walked_counts)
        layout = np.concatenate([layout, here]) if len(layout) else here
    if layout_at == firsts.tolist():  # every section walked, in order: no guess to place
        return layout + offset_rows
    rows = np.arange(len(offset_rows), dtype=np.int64)
    return layout[rows + np.repeat(np.array(layout_at, dtype=np.int64) - firsts, counts)] \
        + offset_rows


def _record_bounds(data: npt.NDArray[np.uint8], area: Buffer, sections: list[Section],
                   layouts: Layouts, where: str) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Every record's start, body start (after the length) and end, cross-checked.

    Each record must end where the next one starts, the last of a section where the section
    ends. As every walk begins each section at its start, that proves every start, whichever
    walk found it. Guessed sections that fail it are walked record by record; should anything
    still fail, the whole buffer is walked again (fast, then exact) to name the fault.
    """
    stops = np.array([section[1] for section in sections], dtype=np.int64)
    counts = np.array([section[2] for section in sections], dtype=np.int64)
    last_rows = np.cumsum(counts) - 1
    starts = _scanned_starts(area, sections, layouts, where)
    try:
        body, record_end, good = _check_lengths(data, starts, stops, last_rows, where)
        if not good.all():  # walk the sections whose guessed layout was wrong
            walked: list[int] = []
            for index in np.unique(np.searchsorted(last_rows, np.flatnonzero(~good))).tolist():
                walked.clear()
                _section_starts(area, sections[index], where, False, walked)
                first = int(last_rows[index] - counts[index] + 1)
                starts[first:first + len(walked)] = walked
            body, record_end, good = _check_lengths(data, starts, stops, last_rows, where)
        if good.all():
            return starts, body, record_end
    except DecodeError:  # a guessed start inside a record can read anything
        pass
    for exact in (False, True):
        starts = _record_starts(area, sections, where, exact)
        body, record_end, good = _check_lengths(data, starts, stops, last_rows, where)
        if good.all():
            return starts, body, record_end
    _check(good, starts, "record length", "inconsistent record lengths", where)
    raise AssertionError("unreachable: the exact walk validates every length")


def _check_lengths(data: npt.NDArray[np.uint8], starts: Int64Array, stops: Int64Array,
                   last_rows: Int64Array,
                   where: str) -> tuple[Int64Array, Int64Array, BoolArray]:
    """Body starts, record ends, and which records end where the next one starts.

    A start guessed wrong (``_scanned_starts``) can land on bytes that read as a varint longer
    than a record length's five; such a length reads as -1, so that its row fails the check
    and its section alone is walked again. Raising there made the caller walk every section
    of the buffer again: 6 wrong guesses among 127 sections (100 B records with random keys,
    16 KiB batches) doubled the walk, 261 against 190 ns per record. A real record whose
    length is over five bytes fails the check too, and the exact walk names it.
    """
    lengths, body = decode_varints(data, starts, 5, f"record length{where}", overlong=-1)
    record_end = body + lengths
    expected = np.empty_like(starts)
    expected[:-1] = starts[1:]
    expected[last_rows] = stops
    return body, record_end, (record_end == expected) & (lengths >= 0)


# --- steps 3 and 4: fields, keys, values, headers ------------------------------------------

_Rows = tuple[Int64Array, Int64Array, npt.NDArray[np.int32], pa.BinaryArray, pa.BinaryArray,
              pa.ListArray | None, npt.NDArray[np.int32]]


def decode_rows(area: Buffer, sections: list[Section], layouts: Layouts,
                 meta: list[tuple[int, int, int, int, int]],
                 start_offset: int | None, end_offset: int | None, include_headers: bool,
                 where: str) -> _Rows:
    if not sections:
        return _empty_rows(include_headers)
    data = np.frombuffer(area, dtype=np.uint8)
    starts, body, record_end = _record_bounds(data, area, sections, layouts, where)
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
    keys = with_validity(gather(data, buffer, key_start, key_end), key_length >= 0)
    values = with_validity(gather(data, buffer, value_start, value_end), value_length >= 0)

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
    return (empty, empty.copy(), np.zeros(0, dtype=np.int32), pa.nulls(0, pa.binary()),
            pa.nulls(0, pa.binary()), pa.nulls(0, HEADERS_TYPE) if include_headers else None,
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
        return pa.nulls(0, HEADERS_TYPE), pos
    keys, values = take_pairs(pa.py_buffer(area), key_start, key_end, value_start, value_end)
    names = pa.Array.from_buffers(pa.string(), total, [None, *keys.buffers()[1:]])
    try:
        names.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: replace bad bytes, as Java's String decoding does
        names = binary_from_list([raw.decode("utf-8", "replace").encode()
                                  for raw in keys.to_pylist()]).cast(pa.string())
    struct_values = pa.StructArray.from_arrays(
        [names, with_validity(values, value_valid)], fields=list(HEADER_STRUCT_TYPE))
    header_list = pa.ListArray.from_arrays(
        from_numpy(list_offsets, pa.int32()), struct_values, type=HEADERS_TYPE,
        mask=from_mask(header_count == 0))
    return header_list, pos


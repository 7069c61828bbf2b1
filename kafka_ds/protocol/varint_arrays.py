"""Zigzag varints for many values at once, with numpy.

Layer: protocol (sans-IO). Imports numpy and ``errors``. Used by ``record_columns`` (decode)
and ``record_encoder`` (encode); the scalar versions are in ``primitives``.

A Kafka record varint is a zigzag-encoded signed integer written 7 bits at a time, least
significant group first, with the high bit of each byte set when another byte follows. The
decoder here reads one varint at each of many positions, by byte rank: rank k is gathered only
for the varints still open after rank k-1. Typical record fields take one or two bytes, so this
is a handful of whole-array operations per field, whatever the number of records.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kafka_ds.protocol.errors import DecodeError

Int64Array = npt.NDArray[np.int64]
UInt8Array = npt.NDArray[np.uint8]

# The thresholds at which a zigzag value needs one more byte: 2**7, 2**14, ..., 2**63.
_SIZE_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)


def decode_varints(data: UInt8Array, positions: Int64Array, max_bytes: int,
                   what: str, overlong: int | None = None) -> tuple[Int64Array, Int64Array]:
    """Decode the zigzag varint starting at each of ``positions`` in ``data``.

    Returns ``(values, positions_after)``. ``max_bytes`` is 5 for varints and 10 for varlongs;
    a longer varint raises ``DecodeError``, or with ``overlong`` given decodes as that value
    (for callers that only check positions, some of which may be wrong guesses; the position
    after it is then meaningless). Positions past the end of ``data`` read its last
    byte instead of raising (``take(mode="clip")``): callers validate every field against the
    record bounds afterwards, and a read past the end always shows up there as a field that
    overruns its record.
    """
    first = data.take(positions, mode="clip")
    if not first.size or int(first.max()) < 0x80:  # every varint is one byte
        small = first.astype(np.int16)
        return ((small >> 1) ^ -(small & 1)).astype(np.int64), positions + 1
    second = data.take(positions + 1, mode="clip")
    if int((first & second).max()) < 0x80:  # none longer than two bytes: the usual case
        more = first >> 7  # 1 where a second byte follows
        small = (first & 0x7F).astype(np.int16) | ((second & 0x7F) * more).astype(np.int16) << 7
        return ((small >> 1) ^ -(small & 1)).astype(np.int64), positions + 1 + more
    return _decode_long_varints(data, positions, first, max_bytes, what, overlong)


def _decode_long_varints(data: UInt8Array, positions: Int64Array, first: UInt8Array,
                         max_bytes: int, what: str, overlong: int | None
                         ) -> tuple[Int64Array, Int64Array]:
    """The general case: byte rank by rank, on all rows while many are open, then on the rest."""
    value = (first & 0x7F).astype(np.int64)
    after = positions + 1
    open_mask = first >= 0x80
    open_rows: Int64Array | None = None  # switch to row indices once few varints are open
    too_long: Int64Array | None = None  # rows still open after max_bytes (with ``overlong``)
    shift = 7
    for _ in range(1, max_bytes):
        if open_rows is None:
            byte = data.take(after, mode="clip")
            value |= ((byte & 0x7F) * open_mask).astype(np.int64) << shift
            after += open_mask
            open_mask &= byte >= 0x80
            still_open = int(np.count_nonzero(open_mask))
            if still_open * 8 < len(positions):
                open_rows = np.flatnonzero(open_mask)
        else:
            byte = data.take(after[open_rows], mode="clip")
            value[open_rows] |= (byte & 0x7F).astype(np.int64) << shift
            after[open_rows] += 1
            open_rows = open_rows[byte >= 0x80]
            still_open = len(open_rows)
        if not still_open:
            break
        shift += 7
    else:
        too_long = np.flatnonzero(open_mask) if open_rows is None else open_rows
        if overlong is None:
            raise DecodeError(what, int(positions[too_long[0]]),
                              f"varint longer than {max_bytes} bytes")
    unsigned = value.view(np.uint64)
    decoded = (unsigned >> np.uint64(1)).view(np.int64) ^ -(value & 1)
    if too_long is not None and overlong is not None:  # (overlong None raised above)
        decoded[too_long] = overlong
    return decoded, after


def zigzag(values: Int64Array) -> npt.NDArray[np.uint64]:
    """Zigzag-encode int64 values: 0, -1, 1, -2 ... become 0, 1, 2, 3 ..."""
    return ((values << 1) ^ (values >> 63)).view(np.uint64)


def varint_sizes(values: Int64Array) -> Int64Array:
    """Bytes each value takes as a zigzag varint (1 to 10); any array shape."""
    return _sizes(zigzag(values))


def _sizes(encoded: npt.NDArray[np.uint64]) -> Int64Array:
    sizes = np.ones(encoded.shape, dtype=np.int64)
    if not encoded.size:
        return sizes
    top = encoded.max()
    for threshold in _SIZE_THRESHOLDS:  # only as many passes as the widest value needs
        if top < threshold:
            break
        sizes += encoded >= threshold
    return sizes


def ragged_bytes(values: Int64Array,
                 sizes: Int64Array | None = None) -> tuple[UInt8Array, Int64Array]:
    """Every value's zigzag varint, back to back in row-major order, and each value's size.

    With values shaped (records, fields) the output is each record's fields in order, record
    after record. Built as a (values, width) byte matrix filled one byte rank (column) at a
    time, then flattened through the mask of bytes in use. ``sizes`` (``varint_sizes(values)``)
    may be passed when the caller already has them.
    """
    encoded = zigzag(values.reshape(-1))
    sizes = _sizes(encoded) if sizes is None else sizes.reshape(-1)
    width = int(sizes.max()) if sizes.size else 1
    matrix = np.empty((len(encoded), width), dtype=np.uint8)
    in_use = np.empty((len(encoded), width), dtype=bool)
    for rank in range(width):
        column = (encoded & np.uint64(0x7F)).astype(np.uint8)
        if rank + 1 < width:  # the continuation bit on every byte but a varint's last
            column |= (sizes > rank + 1).view(np.uint8) << 7
            encoded = encoded >> np.uint64(7)
        matrix[:, rank] = column
        in_use[:, rank] = sizes > rank
    return matrix[in_use], sizes.reshape(values.shape)

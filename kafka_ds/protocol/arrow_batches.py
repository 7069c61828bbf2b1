"""Producer batches straight from Arrow columns: partition choice, grouping, encoding.

Layer: protocol (sans-IO: numpy, pyarrow, ``arrow_numpy``, ``record_encoder``,
``partitioner``, ``accumulator``). Specs: the Java client's ``BuiltInPartitioner`` (murmur2
for keyed records, sticky for the rest, KIP-480/KIP-794) and record format v2 (KIP-98). Used
by ``Producer.send_arrow`` and through it by the Spark sink.

The per-record path (``Producer.send``) keeps Python objects per record and encodes each batch
when the sender drains it. This path never makes a Python object per record::

    Arrow columns (values, keys, headers, timestamps[, partitions])
        -> record_sizes:        each record's size bound, from the offsets buffers (numpy)
        -> choose_partitions:   explicit partition, else murmur2(key) % count (numpy over the
                                keys buffer), else the sticky partition, run by run
        -> encode_partitioned:  one stable argsort by partition and one Arrow ``take`` per
                                column, then per partition zero-copy slices cut at the batch
                                limit; consecutive batches (up to ``_GROUP_BYTES``) encoded
                                by one ``record_encoder`` call, each batch's records section
                                a slice of its output
        -> ColumnarBatch:       a sealed ``ProducerBatch`` carrying its section; the sender
                                only compresses it and writes the header and CRC

Encoding happens in the caller's thread, so a task thread encodes the next batch while the
sender thread compresses and sends the previous ones. The bytes are those of
``records.encode_batch`` for the same records (tests hold the two together).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kafka_ds.protocol.accumulator import RECORD_OVERHEAD_BOUND, ProducerBatch
from kafka_ds.protocol.arrow_numpy import from_numpy, is_valid, list_offsets, to_numpy
from kafka_ds.protocol.errors import EncodeError
from kafka_ds.protocol.partitioner import StickyPartitioner, murmur2_buffers
from kafka_ds.protocol.record_encoder import (
    binary_column,
    binary_lengths,
    encode_records_section,
    encode_records_sections,
)

Int64Array = npt.NDArray[np.int64]
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
# Bytes a header adds beyond its key and value: two length varints (3 bytes each covers
# keys and values under 2 MiB; longer ones only make the bound a little short).
_HEADER_OVERHEAD_BOUND = 6
# How many offending rows an error lists before it only counts the rest.
SHOWN_ROWS = 3
# Runs of one partition at least this long on average are sent as slices of the input;
# shorter ones (keyed records spread over partitions) are gathered by partition first.
_MIN_RUN_RECORDS = 64
# Batches are encoded together up to this many bytes (size bounds), one numpy/Arrow pass for
# all (``record_encoder.encode_records_sections``): the encoder's fixed cost per call is what
# limits 1 KB records, of which a 512 KiB batch holds only ~500. The batches share the
# group's buffer, which lives until the last of them is acknowledged.
_GROUP_BYTES = 4 * 1024 * 1024
# Fewer records than this are encoded batch by batch (the per-record encoder is cheaper).
_VECTOR_MIN_ROWS = 40


class ArrowRecords(NamedTuple):
    """The columns of records bound for one topic, all of the same length.

    ``values`` and ``keys`` are Arrow ``binary`` arrays (nullable); ``keys`` None means every
    key is null. ``timestamps_ms`` is int64 per record. ``headers`` is a
    ``list<struct<key: string, value: binary>>`` array (a null list means no headers) or None.
    """

    values: pa.Array
    keys: pa.Array | None
    timestamps_ms: Int64Array
    headers: pa.Array | None

    @property
    def rows(self) -> int:
        return len(self.values)

    def take(self, indices: Any) -> ArrowRecords:
        order = indices if isinstance(indices, pa.Array) else from_numpy(indices, pa.int64())
        return ArrowRecords(
            self.values.take(order), None if self.keys is None else self.keys.take(order),
            self.timestamps_ms[np.asarray(indices)],
            None if self.headers is None else self.headers.take(order))

    def slice(self, start: int, stop: int) -> ArrowRecords:
        length = stop - start
        return ArrowRecords(
            self.values.slice(start, length),
            None if self.keys is None else self.keys.slice(start, length),
            self.timestamps_ms[start:stop],
            None if self.headers is None else self.headers.slice(start, length))

    def record(self, index: int) -> tuple[bytes | None, bytes | None, int,
                                          list[tuple[str, bytes | None]]]:
        """One record as Python objects (for the rare paths: splitting a rejected batch)."""
        key = None if self.keys is None else self.keys[index].as_py()
        headers = [] if self.headers is None else [
            (item["key"], item["value"]) for item in (self.headers[index].as_py() or ())]
        return key, self.values[index].as_py(), int(self.timestamps_ms[index]), headers


def arrow_records(values: Any, keys: Any = None, *, timestamps_ms: Any = None,
                  headers: Any = None, now_ms: int) -> ArrowRecords:
    """Normalise columns: strings become their UTF-8 bytes (zero-copy), chunked arrays are
    joined, an all-null key column becomes None, and a missing or null timestamp is ``now_ms``.

    ``timestamps_ms`` is None, one int for all records, or a sequence/array of int64 ms
    (an Arrow int64 array may hold nulls).
    """
    value_array = binary_column(values, "values")
    count = len(value_array)
    key_array = None
    if keys is not None:
        key_array = binary_column(keys, "keys")
        if len(key_array) != count:
            raise EncodeError(f"{len(key_array)} keys for {count} values")
        if key_array.null_count == count:
            key_array = None
    stamps = _timestamps(timestamps_ms, count, now_ms)
    header_array = None
    if headers is not None:
        header_array = headers.combine_chunks() if isinstance(headers, pa.ChunkedArray) \
            else headers
        if not isinstance(header_array, pa.Array):
            header_array = pa.array(
                [None if not record else [{"key": k, "value": v} for k, v in record]
                 for record in headers], HEADERS_TYPE)
        if len(header_array) != count:
            raise EncodeError(f"{len(header_array)} header lists for {count} values")
        if header_array.null_count == count or not len(header_array.flatten()):
            header_array = None
    return ArrowRecords(value_array, key_array, stamps, header_array)


def _timestamps(timestamps_ms: Any, count: int, now_ms: int) -> Int64Array:
    if timestamps_ms is None:
        return np.full(count, now_ms, dtype=np.int64)
    if isinstance(timestamps_ms, int):
        return np.full(count, timestamps_ms, dtype=np.int64)
    if isinstance(timestamps_ms, pa.ChunkedArray):
        timestamps_ms = timestamps_ms.combine_chunks()
    if isinstance(timestamps_ms, pa.Array):
        stamps = to_numpy(timestamps_ms.cast(pa.int64()))
        if timestamps_ms.null_count:
            stamps = np.where(is_valid(timestamps_ms), stamps, now_ms)
    else:
        stamps = np.asarray(timestamps_ms, dtype=np.int64)
    if len(stamps) != count:
        raise EncodeError(f"{len(stamps)} timestamps for {count} values")
    return stamps.astype(np.int64, copy=False)


def record_sizes(records: ArrowRecords) -> Int64Array:
    """An upper bound of each record's encoded bytes (as ``accumulator.record_bytes_bound``)."""
    sizes = np.maximum(binary_lengths(records.values), 0) + RECORD_OVERHEAD_BOUND
    if records.keys is not None:
        sizes += np.maximum(binary_lengths(records.keys), 0)
    if records.headers is not None:
        sizes += _header_bytes(records.headers)
    return sizes


def _header_bytes(headers: pa.Array) -> Int64Array:
    """Bytes each record's headers add (keys, values and their length varints)."""
    counts = np.diff(list_offsets(headers))
    if headers.null_count:
        counts[~is_valid(headers)] = 0
    flat = headers.flatten()
    per_header = (np.maximum(binary_lengths(binary_column(flat.field("key"), "header keys")), 0)
                  + np.maximum(binary_lengths(binary_column(flat.field("value"),
                                                            "header values")), 0)
                  + _HEADER_OVERHEAD_BOUND)
    summed = np.zeros(len(per_header) + 1, dtype=np.int64)
    np.cumsum(per_header, out=summed[1:])
    ends = np.cumsum(counts)
    return summed[ends] - summed[ends - counts]


def key_partitions(keys: pa.Array, partition_count: int) -> Int64Array:
    """Java's partition of each keyed record (``(murmur2(key) & 0x7fffffff) % count``);
    -1 where the key is null."""
    out = np.full(len(keys), -1, dtype=np.int64)
    rows = np.arange(len(keys), dtype=np.int64)
    if keys.null_count:
        rows = rows[is_valid(keys)]
    if not len(rows):
        return out
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset:
                                                                keys.offset + len(keys) + 1]
    data_buffer = keys.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None \
        else np.zeros(0, dtype=np.uint8)
    hashes = murmur2_buffers(offsets, data, rows)
    out[rows] = (hashes & 0x7FFFFFFF) % partition_count
    return out


def choose_partitions(records: ArrowRecords, sizes: Int64Array, topic: str, partition_count: int,
                      available: Sequence[int], sticky: StickyPartitioner, *,
                      explicit: Int64Array | None = None, ignore_keys: bool = False,
                      limit_bytes: int | None = None) -> Int64Array:
    """The partition of every record, by the producer's rules in order.

    ``explicit`` (-1 for "none") wins; it must name an existing partition. Keyed records go
    where the Java producer puts them, unless ``ignore_keys``. The rest fill the sticky
    partition run by run, switching after ``batch.size`` bytes (``sticky`` keeps the state
    across calls, as it does for ``send``); with ``limit_bytes`` (the batch limit that
    ``encode_partitioned`` cuts at), each run ends before the record that would not fit in
    it, so that a run makes one batch (``StickyPartitioner.fill``).
    """
    count = records.rows
    chosen = np.full(count, -1, dtype=np.int64)
    if explicit is not None:
        explicit = np.asarray(explicit, dtype=np.int64)
        if len(explicit) != count:
            raise EncodeError(f"{len(explicit)} partitions for {count} values")
        wrong = np.flatnonzero((explicit < -1) | (explicit >= partition_count))
        if len(wrong):
            raise ValueError(
                f"{len(wrong)} record(s) name a partition that topic {topic!r} does not have "
                f"(it has {partition_count}: 0..{partition_count - 1}): "
                + describe_rows(wrong, lambda row: f"partition {int(explicit[row])}")
                + "; fix the partition column or leave it null to let the key decide")
        chosen[:] = explicit
    if records.keys is not None and not ignore_keys:
        keyed = key_partitions(records.keys, partition_count)
        np.copyto(chosen, keyed, where=chosen < 0)
    free = np.flatnonzero(chosen < 0)
    if len(free):
        cumulative = np.zeros(len(free) + 1, dtype=np.int64)
        np.cumsum(sizes[free], out=cumulative[1:])
        bounds = cumulative.tolist()
        start = 0
        while start < len(free):
            target, stop = (sticky.run(topic, available, bounds, start, len(free))
                            if limit_bytes is None else
                            sticky.fill(topic, available, bounds, start, len(free), limit_bytes))
            chosen[free[start:stop]] = target
            start = stop
    return chosen


def describe_rows(rows: Sequence[int] | npt.NDArray[Any], what: Any,
                  shown: int = SHOWN_ROWS) -> str:
    """``row 3 (partition 9), row 7 (partition -4) and 12 more``: an error's list of rows."""
    listed = ", ".join(f"row {int(row)} ({what(int(row))})" for row in list(rows[:shown]))
    rest = len(rows) - shown
    return listed + (f" and {rest} more" if rest > 0 else "")


class EncodedRecords(NamedTuple):
    """Records of one partition encoded as an uncompressed records section."""

    section: memoryview
    record_count: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    records: ArrowRecords  # the same records as columns, kept to split the batch if needed


def encode_records(records: ArrowRecords) -> EncodedRecords:
    """The records section of a batch holding ``records`` (the first timestamp is the base)."""
    stamps = records.timestamps_ms
    base = int(stamps[0])
    keys = records.keys if records.keys is not None else pa.nulls(records.rows, pa.binary())
    section = encode_records_section(keys, records.values, stamps - base,
                                     headers=records.headers)
    # As the Java builder: the running maximum starts at NO_TIMESTAMP (-1).
    return EncodedRecords(section, records.rows, base, max(int(stamps.max()), -1), records)


def encode_partitioned(records: ArrowRecords, sizes: Int64Array, partitions: Int64Array,
                       limit_bytes: int) -> Iterator[tuple[int, EncodedRecords]]:
    """``(partition, encoded records)`` in batches of at most ``limit_bytes`` (by the size
    bounds; a single larger record makes a batch of its own), in record order per partition."""
    if not records.rows:
        return
    edges = np.flatnonzero(np.diff(partitions)) + 1
    if len(edges) * _MIN_RUN_RECORDS <= records.rows:
        # Long runs of one partition (sticky unkeyed records, an explicit partition, few
        # distinct keys in order): zero-copy slices of the input, in record order.
        ordered, ordered_sizes, grouped = records, sizes, partitions
    else:  # interleaved partitions (keyed records): one stable reorder, one copy
        order = np.argsort(partitions, kind="stable")
        grouped = partitions[order]
        ordered, ordered_sizes = records.take(order), sizes[order]
        edges = np.flatnonzero(np.diff(grouped)) + 1
    starts = [0, *edges.tolist()]
    stops = [*edges.tolist(), records.rows]
    pieces: list[tuple[int, int, int]] = []  # (partition, start, stop) over ``ordered``
    for start, stop in zip(starts, stops, strict=True):
        partition = int(grouped[start])
        pieces += [(partition, start + piece_start, start + piece_stop)
                   for piece_start, piece_stop in _cut(ordered_sizes[start:stop], limit_bytes)]
    bounds = np.zeros(len(ordered_sizes) + 1, dtype=np.int64)
    np.cumsum(ordered_sizes, out=bounds[1:])
    first = 0
    while first < len(pieces):
        # Consecutive batches encoded together, up to _GROUP_BYTES by the size bounds.
        last = first
        while (last + 1 < len(pieces)
               and bounds[pieces[last + 1][2]] - bounds[pieces[first][1]] <= _GROUP_BYTES):
            last += 1
        yield from _encode_group(ordered, pieces[first:last + 1])
        first = last + 1


def _encode_group(records: ArrowRecords, pieces: list[tuple[int, int, int]]
                  ) -> Iterator[tuple[int, EncodedRecords]]:
    """Consecutive batches ``(partition, start, stop)`` encoded by one call, each a slice."""
    if len(pieces) == 1 or pieces[-1][2] - pieces[0][1] < _VECTOR_MIN_ROWS:
        for partition, start, stop in pieces:
            yield partition, encode_records(records.slice(start, stop))
        return
    origin, end = pieces[0][1], pieces[-1][2]
    group = records.slice(origin, end)
    firsts = np.array([start - origin for _, start, _ in pieces], dtype=np.int64)
    counts = np.diff(np.append(firsts, end - origin))
    first_of = np.repeat(firsts, counts)  # each record's batch's first record
    stamps = group.timestamps_ms
    keys = group.keys if group.keys is not None else pa.nulls(group.rows, pa.binary())
    section, ends = encode_records_sections(
        keys, group.values, stamps - stamps[first_of],
        np.arange(group.rows, dtype=np.int64) - first_of, headers=group.headers)
    # As the Java builder: the running maximum starts at NO_TIMESTAMP (-1).
    maxima = np.maximum(np.maximum.reduceat(stamps, firsts), -1).tolist()
    bases = stamps[firsts].tolist()
    for index, (partition, start, stop) in enumerate(pieces):
        begin = int(ends[start - origin - 1]) if start > origin else 0
        yield partition, EncodedRecords(
            section[begin:int(ends[stop - origin - 1])], stop - start, bases[index],
            maxima[index], records.slice(start, stop))


def _cut(sizes: Int64Array, limit_bytes: int) -> Iterator[tuple[int, int]]:
    """Greedy runs of consecutive records whose sizes sum to at most ``limit_bytes``."""
    cumulative = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=cumulative[1:])
    start = 0
    total = len(sizes)
    while start < total:
        stop = int(np.searchsorted(cumulative, cumulative[start] + limit_bytes, side="right")) - 1
        stop = min(max(stop, start + 1), total)
        yield start, stop
        start = stop


class ColumnarBatch(ProducerBatch):
    """A sealed batch built from columns: its records section is already encoded.

    It joins a partition's queue whole (``RecordAccumulator.append_batch``) and never takes
    more records. The sender compresses ``encoded_records.section`` and writes the header
    (producer id, epoch and sequence are known only when it drains the batch). Once the
    batch is done its section and columns are dropped: a task's futures keep every batch it
    sent, and would otherwise keep every byte it wrote (its input, the sections and the
    batches as sent) until its last acknowledgement.
    """

    __slots__ = ("count", "encoded_records")

    def __init__(self, topic: str, partition: int, created_ms: int, encoded: EncodedRecords,
                 delivery_deadline_ms: int, result: Any = None) -> None:
        size = len(encoded.section)
        super().__init__(topic, partition, created_ms, size, delivery_deadline_ms, result)
        self.encoded_records: EncodedRecords | None = encoded
        self.count = encoded.record_count
        self.size_bytes = size
        self.closed = True  # sealed: ready to send, never appended to

    @property
    def record_count(self) -> int:
        return self.count

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.count - 1

    def record(self, index: int) -> tuple[bytes | None, bytes | None, int,
                                          Sequence[tuple[str, bytes | None]]]:
        if self.encoded_records is None:
            raise RuntimeError(f"{self!r} is done: its records were released")
        return self.encoded_records.records.record(index)

    def release_payload(self) -> None:
        super().release_payload()
        self.encoded_records = None

    def __repr__(self) -> str:
        return (f"ColumnarBatch({self.topic}-{self.partition}, {self.record_count} records, "
                f"seq {self.base_sequence}, attempts {self.attempts})")

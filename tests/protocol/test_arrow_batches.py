"""Producer batches from Arrow columns: partitions as Java picks them, bytes as the
per-record encoder writes them, batches cut at the limit, order kept per partition."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_partitioner import JAVA

from kafka_ds.protocol.accumulator import RecordAccumulator
from kafka_ds.protocol.arrow_batches import (
    HEADERS_TYPE,
    ColumnarBatch,
    arrow_records,
    choose_partitions,
    encode_partitioned,
    key_partitions,
    record_sizes,
)
from kafka_ds.protocol.partitioner import StickyPartitioner, partition_for_key
from kafka_ds.protocol.record_builder import NewRecord, encode_records, record_size_bytes

Row = tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]] | None]


def _rows(seed: int, count: int, *, keys: bool = True, headers: bool = True) -> list[Row]:
    rnd = random.Random(seed)
    rows: list[Row] = []
    for index in range(count):
        key = None if not keys or rnd.random() < 0.2 else \
            rnd.randbytes(rnd.choice([0, 1, 3, 4, 7, 8, 13, 40]))
        value = None if rnd.random() < 0.05 else rnd.randbytes(rnd.randint(0, 300))
        stamp = 1_700_000_000_000 + rnd.randint(-5_000, 5_000) + index
        row_headers = None
        if headers and rnd.random() < 0.4:
            row_headers = [(f"h{i}", None if rnd.random() < 0.2 else rnd.randbytes(5))
                           for i in range(rnd.randint(0, 3))]
        rows.append((key, value, stamp, row_headers))
    return rows


def _records(rows: list[Row], now_ms: int = 0):  # type: ignore[no-untyped-def]
    return arrow_records(
        pa.array([row[1] for row in rows], pa.binary()),
        pa.array([row[0] for row in rows], pa.binary()),
        timestamps_ms=pa.array([row[2] for row in rows], pa.int64()),
        headers=pa.array([None if row[3] is None else [{"key": k, "value": v} for k, v in row[3]]
                          for row in rows], HEADERS_TYPE), now_ms=now_ms)


def _reference_section(rows: list[Row]) -> bytes:
    """The per-record encoder's records section for ``rows`` (the first timestamp is base)."""
    return bytes(encode_records([NewRecord(key, value, stamp, headers or ())
                                 for key, value, stamp, headers in rows], rows[0][2]))


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32), count=st.integers(1, 400), partitions=st.integers(1, 9),
       limit=st.sampled_from([200, 2_000, 1 << 20]), keys=st.booleans(),
       headers=st.booleans())
def test_batches_hold_each_partitions_rows_in_order_as_the_reference_encodes_them(
        seed: int, count: int, partitions: int, limit: int, keys: bool, headers: bool) -> None:
    # Several batches are encoded by one call and cut from its output (headers or none,
    # keys or none take different paths there): each must be the bytes of its records alone.
    rows = _rows(seed, count, keys=keys, headers=headers)
    records = _records(rows)
    sizes = record_sizes(records)
    chosen = choose_partitions(records, sizes, "t", partitions, list(range(partitions)),
                               StickyPartitioner(limit, random.Random(seed)))
    expected = {p: [row for row, c in zip(rows, chosen.tolist(), strict=True) if c == p]
                for p in range(partitions)}
    got: dict[int, list[Row]] = {p: [] for p in range(partitions)}
    for partition, encoded in encode_partitioned(records, sizes, chosen, limit):
        start = len(got[partition])
        batch_rows = expected[partition][start:start + encoded.record_count]
        assert bytes(encoded.section) == _reference_section(batch_rows)
        assert encoded.base_timestamp_ms == batch_rows[0][2]
        assert encoded.max_timestamp_ms == max(row[2] for row in batch_rows)
        if encoded.record_count > 1:  # only a single record may pass the limit
            assert sum(sizes[chosen == partition][start:start + encoded.record_count]) <= limit
        got[partition].extend(batch_rows)
    assert got == expected


def test_keyed_rows_go_where_java_puts_them() -> None:
    keys = [key.encode("utf-8") for key, *_ in JAVA]
    for count, column in ((7, 2), (1000, 3)):
        expected = [mod7 if count == 7 else mod1000 for _, _, mod7, mod1000 in JAVA]
        for array in (pa.array(keys, pa.binary()), pa.array([k for k, *_ in JAVA], pa.string())):
            assert key_partitions(array, count).tolist() == expected, column


def test_key_hash_of_sliced_arrays_and_many_lengths_equals_the_scalar_hash() -> None:
    rnd = random.Random(5)
    keys = [None if rnd.random() < 0.1 else rnd.randbytes(rnd.randint(0, 70))
            for _ in range(3000)]
    array = pa.array(keys, pa.binary()).slice(17, 2500)  # offset 17: buffers start earlier
    got = key_partitions(array, 13).tolist()
    assert got == [-1 if key is None else partition_for_key(key, 13) for key in keys[17:2517]]


def test_explicit_partitions_win_and_out_of_range_ones_are_summarised() -> None:
    records = arrow_records(pa.array([b"v"] * 6), pa.array([b"k"] * 6), now_ms=1)
    sizes = record_sizes(records)
    explicit = np.array([2, -1, 0, -1, 1, 2])
    chosen = choose_partitions(records, sizes, "t", 3, [0, 1, 2], StickyPartitioner(100),
                               explicit=explicit)
    keyed = partition_for_key(b"k", 3)
    assert chosen.tolist() == [2, keyed, 0, keyed, 1, 2]
    bad = np.array([0, 7, -4, 3, 9, 1])
    with pytest.raises(ValueError) as error:
        choose_partitions(records, sizes, "t", 3, [0, 1, 2], StickyPartitioner(100),
                          explicit=bad)
    message = str(error.value)
    assert "4 record(s) name a partition that topic 't' does not have (it has 3" in message
    assert "row 1 (partition 7), row 2 (partition -4), row 3 (partition 3) and 1 more" in message
    assert "row 4" not in message


def test_unkeyed_rows_stick_to_a_partition_for_batch_size_bytes() -> None:
    records = arrow_records(pa.array([b"x" * 83] * 1000), None, now_ms=1)
    sizes = record_sizes(records)  # 100 bytes each
    chosen = choose_partitions(records, sizes, "t", 4, [0, 1, 2, 3],
                               StickyPartitioner(2_000, random.Random(3)))
    runs = np.flatnonzero(np.diff(chosen)) + 1
    lengths = np.diff([0, *runs.tolist(), 1000])
    assert set(lengths[:-1].tolist()) == {20}  # 2000 bytes of 100-byte records
    assert all(a != b for a, b in zip(chosen[runs - 1], chosen[runs], strict=True))


def test_with_a_batch_limit_each_sticky_run_makes_one_batch() -> None:
    records = arrow_records(pa.array([b"x" * 83] * 1000), None, now_ms=1)
    sizes = record_sizes(records)  # 100 bytes each
    sticky = StickyPartitioner(2_000, random.Random(3))
    # A limit under batch.size (its header taken off): 19 records fit, the 20th would not.
    chosen = choose_partitions(records, sizes, "t", 4, [0, 1, 2, 3], sticky, limit_bytes=1_939)
    runs = np.flatnonzero(np.diff(chosen)) + 1
    lengths = np.diff([0, *runs.tolist(), 1000])
    assert set(lengths[:-1].tolist()) == {19}
    assert all(a != b for a, b in zip(chosen[runs - 1], chosen[runs], strict=True))
    batches = list(encode_partitioned(records, sizes, chosen, 1_939))
    assert len(batches) == len(lengths)  # no spill of a record past a full batch
    # The next call fills what the last run left, then switches; a limit over batch.size
    # (compressed batches, the ratio estimate below 1) fills to the limit.
    more = choose_partitions(records, sizes, "t", 4, [0, 1, 2, 3], sticky, limit_bytes=5_000)
    assert more[0] == chosen[-1]
    first_run = int(np.flatnonzero(np.diff(more))[0]) + 1
    assert first_run == 50 - int(lengths[-1])
    assert set(np.diff(np.flatnonzero(np.diff(more))).tolist()) == {50}


def test_size_bounds_cover_the_encoded_records() -> None:
    rows = _rows(11, 300)
    records = _records(rows)
    bounds = record_sizes(records).tolist()
    for (key, value, stamp, headers), bound in zip(rows, bounds, strict=True):
        actual = record_size_bytes(0, stamp - rows[0][2], key, value, headers or ())
        assert actual <= bound


def test_defaults_nulls_and_strings() -> None:
    records = arrow_records(pa.array(["a", None, "ç"]), pa.array([None, None, None], pa.string()),
                            timestamps_ms=pa.array([5, None, 7], pa.int64()),
                            headers=pa.array([None, [], None], HEADERS_TYPE), now_ms=99)
    assert records.keys is None and records.headers is None  # all null: dropped
    assert records.values.type == pa.binary()
    assert records.values.to_pylist() == [b"a", None, "ç".encode()]
    assert records.timestamps_ms.tolist() == [5, 99, 7]


def test_sealed_batch_joins_the_queue_after_the_open_one_and_respects_memory() -> None:
    acc = RecordAccumulator(batch_size_bytes=10_000, linger_ms=1_000,
                            buffer_memory_bytes=5_000)
    open_batch, _, _ = acc.append("t", 0, None, b"x", 0, None, 20, now_ms=0)  # type: ignore[misc]
    rows = [(None, b"y" * 100, 10 + i, None) for i in range(20)]
    records = _records(rows)
    (partition, encoded), = encode_partitioned(records, record_sizes(records),
                                               np.zeros(20, dtype=np.int64), 1 << 20)
    sealed = ColumnarBatch("t", partition, 0, encoded, 60_000)
    assert sealed.record_count == 20 and sealed.record(3) == (None, b"y" * 100, 13, [])
    assert acc.append_batch(sealed)
    assert list(acc.queued("t", 0)) == [open_batch, sealed]
    assert open_batch.closed  # later records must not jump ahead of the sealed batch
    later, _, is_new = acc.append("t", 0, None, b"z", 0, None, 20, now_ms=1)  # type: ignore[misc]
    assert is_new and later is not sealed
    big = ColumnarBatch("t", 1, 0, encoded._replace(section=memoryview(b"\0" * 6_000)), 60_000)
    assert not acc.append_batch(big)  # over buffer.memory while others wait
    assert acc.used_bytes == 20 + len(encoded.section) + 20

"""The encoder's values-only path (every key null, no headers: what a Spark sink writing only
``value`` sends), checked against kafka-python's record batch builder, an independent
implementation of the v2 format."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_ds.protocol import record_encoder
from kafka_ds.protocol.record_encoder import encode_records_sections
from kafka_ds.protocol.records import HEADER_BYTES


def kafka_python_section(values: list[bytes], timestamps_ms: list[int]) -> bytes:
    """The records section kafka-python writes for unkeyed, header-less records."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for offset, (value, timestamp) in enumerate(zip(values, timestamps_ms, strict=True)):
        assert builder.append(offset, timestamp, None, value, []) is not None
    return bytes(builder.build())[HEADER_BYTES:]


def spied(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls of ``record_encoder.<name>`` (to prove which path ran)."""
    calls: list[int] = []
    original = getattr(record_encoder, name)

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(record_encoder, name, spy)
    return calls


def encode_batches(batches: list[tuple[list[bytes], list[int]]], padded: bool) -> list[bytes]:
    """Several batches encoded by one ``encode_records_sections`` call, cut back apart."""
    values = [value for batch_values, _ in batches for value in batch_values]
    column = pa.array(values, pa.binary())
    if padded:  # a slice of a larger array, as Spark's batches are after a split
        column = pa.array([b"before", *values, b"after"], pa.binary()).slice(1, len(values))
    stamps = np.array([stamp for _, batch_stamps in batches for stamp in batch_stamps],
                      dtype=np.int64)
    firsts = np.cumsum([0] + [len(batch_values) for batch_values, _ in batches[:-1]])
    first_of = np.repeat(firsts, [len(batch_values) for batch_values, _ in batches])
    section, ends = encode_records_sections(
        pa.nulls(len(values), pa.binary()), column, stamps - stamps[first_of],
        np.arange(len(values), dtype=np.int64) - first_of)
    bounds = [0, *ends.tolist()]
    return [bytes(section[bounds[first]:bounds[first + len(batch_values)]])
            for first, (batch_values, _) in zip(firsts.tolist(), batches, strict=True)]


@pytest.mark.parametrize("width", [0, 1, 100, 1000, 20_000])
@pytest.mark.parametrize("padded", [False, True])
def test_fixed_width_values_match_kafka_python(monkeypatch: pytest.MonkeyPatch, width: int,
                                               padded: bool) -> None:
    # Batches of 1 to 300 records: offset deltas cross 63 (their varint grows to 2 bytes);
    # timestamps step within one varint size and across several.
    only = spied(monkeypatch, "_encode_values_only")
    rnd = random.Random(width)
    batches = []
    for count in (300, 1, 64, 65, 130):
        base = 1_700_000_000_000 + rnd.randint(0, 10**6)
        stamps = [base + (index // 50) * 100 for index in range(count)]
        batches.append(([rnd.randbytes(width) for _ in range(count)], stamps))
    got = encode_batches(batches, padded)
    assert got == [kafka_python_section(values, stamps) for values, stamps in batches]
    assert only


def test_values_of_any_width_match_kafka_python(monkeypatch: pytest.MonkeyPatch) -> None:
    only = spied(monkeypatch, "_encode_values_only")
    rnd = random.Random(7)
    batches = []
    for count in (200, 3, 90):
        stamps = [rnd.randint(-(2**40), 2**40) for _ in range(count)]  # every varint size
        batches.append(([rnd.randbytes(rnd.choice([0, 5, 200, 3000])) for _ in range(count)],
                        stamps))
    for padded in (False, True):
        got = encode_batches(batches, padded)
        assert got == [kafka_python_section(values, stamps) for values, stamps in batches]
    assert len(only) == 2


def test_a_null_value_or_a_key_leaves_the_values_only_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    only = spied(monkeypatch, "_encode_values_only")
    values = pa.array([b"a" * 10] * 50 + [None] + [b"b" * 10] * 49, pa.binary())
    keys = pa.array([None] * 99 + [b"k"], pa.binary())
    zeros = np.zeros(100, dtype=np.int64)
    offsets = np.arange(100, dtype=np.int64)
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for offset, value in enumerate(values.to_pylist()):
        builder.append(offset, 0, None, value, [])
    section, _ = encode_records_sections(pa.nulls(100, pa.binary()), values, zeros, offsets)
    assert bytes(section) == bytes(builder.build())[HEADER_BYTES:]
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for offset, key in enumerate(keys.to_pylist()):
        builder.append(offset, 0, key, b"v", [])
    section, _ = encode_records_sections(keys, pa.array([b"v"] * 100, pa.binary()), zeros,
                                         offsets)
    assert bytes(section) == bytes(builder.build())[HEADER_BYTES:]
    assert not only

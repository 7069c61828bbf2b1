"""The columnar encoder is byte-identical to the per-record encoder."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from record_samples import random_record

from kafka_ds.protocol import record_encoder
from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import EncodeError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.record_columns import HEADERS_TYPE, decode_columns
from kafka_ds.protocol.record_encoder import encode_batch_columns, encode_records_section
from kafka_ds.protocol.records import HEADER_BYTES

BATCH_OPTIONS = dict(base_offset=77, producer_id=12, producer_epoch=3, base_sequence=40,
                     partition_leader_epoch=5)


def columns_of(records: list[NewRecord]) -> tuple[list, list, np.ndarray, list]:
    return ([r.key for r in records], [r.value for r in records],
            np.array([r.timestamp_ms for r in records], dtype=np.int64),
            [list(r.headers) for r in records])


@pytest.fixture(params=["vectorised", "default"])
def vector_threshold(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run a test with every batch size on the numpy path, then with the usual threshold."""
    saved = record_encoder._VECTOR_MIN_ROWS
    if request.param == "vectorised":
        record_encoder._VECTOR_MIN_ROWS = 0
    yield
    record_encoder._VECTOR_MIN_ROWS = saved


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), count=st.integers(1, 120), headers=st.booleans(),
       codec=st.sampled_from(list(Compression)), transactional=st.booleans(),
       wide_timestamps=st.booleans())
def test_byte_identical_to_the_per_record_encoder(vector_threshold: None, seed: int, count: int,
                                                  headers: bool, codec: Compression,
                                                  transactional: bool,
                                                  wide_timestamps: bool) -> None:
    rnd = random.Random(seed)
    records = []
    for _ in range(count):
        timestamp = (rnd.randint(-(2**62), 2**62) if wide_timestamps
                     else 1_700_000_000_000 + rnd.randint(-3000, 10**6))
        records.append(random_record(rnd, timestamp_ms=timestamp, headers=headers,
                                     max_value_bytes=rnd.choice([50, 500, 20000])))
    expected = encode_batch(records, compression=codec, is_transactional=transactional,
                            **BATCH_OPTIONS)
    keys, values, timestamps, header_lists = columns_of(records)
    got = encode_batch_columns(keys, values, timestamps, header_lists if headers else None,
                               compression=codec, is_transactional=transactional,
                               **BATCH_OPTIONS)
    assert got == expected


def test_arrow_inputs_of_every_binary_flavour(vector_threshold: None) -> None:
    rnd = random.Random(9)
    records = [random_record(rnd, timestamp_ms=1000 + i) for i in range(50)]
    expected = encode_batch(records)
    keys, values, timestamps, header_lists = columns_of(records)
    header_array = pa.array([[{"key": k, "value": v} for k, v in h] or None
                             for h in header_lists], HEADERS_TYPE)
    variants = [
        (pa.array(keys, pa.binary()), pa.array(values, pa.large_binary())),
        (pa.chunked_array([pa.array(keys[:10], pa.binary()), pa.array(keys[10:], pa.binary())]),
         pa.array(values, pa.binary())),
    ]
    for key_column, value_column in variants:
        assert encode_batch_columns(key_column, value_column, timestamps, header_array) == expected
    # Sliced arrays (non-zero Arrow offsets) and string columns.
    padded = pa.array([b"zz", *keys], pa.binary()).slice(1)
    padded_headers = pa.concat_arrays([header_array[:1], header_array]).slice(1)
    assert encode_batch_columns(padded, values, timestamps, padded_headers) == expected
    text = [NewRecord("k\u00e9".encode(), b"v", 5)]
    assert encode_batch_columns(pa.array(["k\u00e9"]), [b"v"], np.array([5])) == encode_batch(text)


def test_offset_deltas_and_log_append_time(vector_threshold: None) -> None:
    records = [NewRecord(b"a", b"1", 10, offset_delta=0), NewRecord(b"b", b"2", 5, offset_delta=9)]
    expected = encode_batch(records, timestamp_type=1, max_timestamp_ms=500)
    got = encode_batch_columns([b"a", b"b"], [b"1", b"2"], np.array([10, 5]),
                               offset_deltas=np.array([0, 9]), timestamp_type=1,
                               max_timestamp_ms=500)
    assert got == expected
    assert decode_columns(got).offsets.tolist() == [0, 9]


def test_section_alone_and_empty_inputs(vector_threshold: None) -> None:
    records = [NewRecord(b"k", b"v", 3, [("h", b"1")])]
    section = encode_records_section([b"k"], [b"v"], np.array([0]), headers=[[("h", b"1")]])
    assert bytes(section) == encode_batch(records)[HEADER_BYTES:]
    assert bytes(encode_records_section([], [], np.array([], dtype=np.int64))) == b""
    assert encode_batch_columns([], [], np.array([], dtype=np.int64)) == encode_batch([])


def test_encoder_input_errors(vector_threshold: None) -> None:
    with pytest.raises(EncodeError, match="lengths differ"):
        encode_records_section([b"a"], [b"b", b"c"], np.array([0]))
    with pytest.raises(EncodeError, match="must be binary"):
        encode_records_section(pa.array([1]), [b"b"], np.array([0]))
    with pytest.raises(EncodeError, match="offset delta"):
        encode_records_section([b"a"], [b"b"], np.array([0]), offset_deltas=np.array([2**40]))
    with pytest.raises(EncodeError, match="header keys"):
        encode_records_section([b"a"], [b"b"], np.array([0]),
                               headers=pa.array([[{"key": None, "value": b"x"}]], HEADERS_TYPE))
    with pytest.raises(EncodeError, match="header lists"):
        encode_records_section([b"a"], [b"b"], np.array([0]), headers=[[], []])

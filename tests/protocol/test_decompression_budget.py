"""One decompression budget per partition per response, whatever the message format.

The attack: a buffer of many small gzip wrappers (magic 0/1) or v2 batches, each inflating to
a lot. A cap per wrapper lets 9 KB of gzip become 8 MiB under a 2 MiB cap (and about 4 GiB at
the default partition fetch size); the budget must hold for the buffer as a whole, and the
fetcher's response budget for all partitions together.
"""

from __future__ import annotations

import pytest
from record_samples import legacy_message, legacy_wrapper

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.decompression_budget import DecompressionBudget
from kafka_ds.protocol.errors import DecodeError
from kafka_ds.protocol.record_builder import NewRecord, encode_batch
from kafka_ds.protocol.record_columns import decode_columns
from kafka_ds.protocol.record_columns_legacy import decode_columns_per_record
from kafka_ds.protocol.records import iter_batches

MIB = 1024 * 1024


def _bomb_wrappers(count: int, first_offset: int = 0) -> bytes:
    """``count`` gzip wrappers, each holding one message whose value is 1 MiB of zeros:
    about a kilobyte each on the wire."""
    parts = []
    for index in range(count):
        inner = legacy_message(1, 0, None, bytes(MIB), offset=0)
        parts.append(legacy_wrapper(inner, Compression.GZIP, offset=first_offset + index))
    return b"".join(parts)


def test_gzip_wrappers_share_one_budget_per_partition() -> None:
    buf = _bomb_wrappers(8)
    assert len(buf) < 16 * 1024  # a few KB on the wire ...
    # ... fits a generous cap (8 MiB of values plus message overhead) ...
    assert len(decode_columns(buf, max_decompressed_bytes=9 * MIB)) == 8
    # ... but not a 2 MiB one, which each wrapper alone (1 MiB) would pass.
    with pytest.raises(DecodeError, match=r"2097152 bytes \(max_decompressed_bytes"):
        decode_columns(buf, max_decompressed_bytes=2 * MIB)


def test_the_per_record_path_and_iter_batches_share_it_too() -> None:
    buf = _bomb_wrappers(4)
    with pytest.raises(DecodeError, match="2097152"):
        decode_columns_per_record(buf, max_decompressed_bytes=2 * MIB)
    with pytest.raises(DecodeError, match="2097152"):
        for batch in iter_batches(buf, max_decompressed_bytes=2 * MIB):
            list(batch)


def test_v2_batches_and_legacy_wrappers_draw_on_the_same_budget() -> None:
    v2 = encode_batch([NewRecord(None, bytes(MIB))], base_offset=0,
                      compression=Compression.GZIP)
    mixed = v2 + _bomb_wrappers(1, first_offset=1)
    assert len(decode_columns(mixed, max_decompressed_bytes=3 * MIB)) == 2
    with pytest.raises(DecodeError, match="max_decompressed_bytes"):
        decode_columns(mixed, max_decompressed_bytes=int(1.5 * MIB))


def test_a_response_budget_bounds_all_partitions_together() -> None:
    partition = _bomb_wrappers(2)  # 2 MiB each: within a 3 MiB partition cap
    response = DecompressionBudget(5 * MIB, name="fetch.max.decompressed.response.bytes")
    decode_columns(partition, max_decompressed_bytes=3 * MIB, budget=response)
    decode_columns(partition, max_decompressed_bytes=3 * MIB, budget=response)
    assert response.spent_bytes > 4 * MIB
    with pytest.raises(DecodeError, match=r"fetch\.max\.decompressed\.response\.bytes"):
        decode_columns(partition, max_decompressed_bytes=3 * MIB, budget=response)


def test_v2_batches_charge_the_response_budget() -> None:
    batches = b"".join(encode_batch([NewRecord(None, bytes(MIB))], base_offset=offset,
                                    compression=Compression.ZSTD) for offset in range(3))
    response = DecompressionBudget(2 * MIB, name="response cap")
    with pytest.raises(DecodeError, match="response cap"):
        decode_columns(batches, max_decompressed_bytes=4 * MIB, budget=response)

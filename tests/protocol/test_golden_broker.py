"""Record batches captured from a real Kafka broker, written by confluent-kafka, decoded field
for field.

The ``golden/*.bin`` files are log segments copied from a Kafka 4.4 broker's data directory by
``integration/capture_golden.py``: one per codec, plus a committed and an aborted transaction
with their control records. ``golden/expected.json`` states what the writer sent. Both decoders
(the per-record iterator and the columnar one) must agree with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kafka_ds.protocol.compression import Compression
from kafka_ds.protocol.errors import CorruptRecordError
from kafka_ds.protocol.read_committed import filter_committed
from kafka_ds.protocol.record_columns import decode_columns
from kafka_ds.protocol.records import ControlRecordType, RecordBatch, iter_batches

GOLDEN = Path(__file__).parent / "golden"
EXPECTED: dict[str, Any] = json.loads((GOLDEN / "expected.json").read_text())
CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_batch_decodes_to_what_the_writer_sent(name: str) -> None:
    data = (GOLDEN / name).read_bytes()
    reader = iter_batches(data, topic=name, partition=0)
    batches = list(reader)
    assert reader.position == len(data) and not reader.has_partial_batch
    expected_batches = EXPECTED[name]["batches"]
    assert len(batches) == len(expected_batches)
    producer_ids = set()
    for batch, expected in zip(batches, expected_batches, strict=True):
        assert isinstance(batch, RecordBatch)
        header = batch.header
        assert header.compression == CODECS[expected["codec"]]
        assert header.is_transactional == expected["transactional"]
        assert header.is_control == (expected["control"] is not None)
        if header.is_transactional:
            producer_ids.add(header.producer_id)
        if expected["control"] is not None:
            marker = batch.control_record()
            assert marker is not None
            assert marker.type == ControlRecordType[expected["control"]]
            assert header.base_offset == expected["offset"]
            continue
        records = batch.records()
        assert [r.offset for r in records] == [e["offset"] for e in expected["records"]]
        for record, want in zip(records, expected["records"], strict=True):
            assert record.key == _bytes(want["key"])
            assert record.value == _bytes(want["value"])
            assert record.timestamp_ms == want["timestamp_ms"]
            headers = [(key, value) for key, value in record.headers] or None
            assert headers == ([(k, _bytes(v)) for k, v in want["headers"]]
                               if want["headers"] else None)
    # One transactional producer wrote every batch and both markers of the txn topic.
    assert len(producer_ids) <= 1 and all(pid >= 0 for pid in producer_ids)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_columnar_decode_agrees_with_the_writer(name: str) -> None:
    data = (GOLDEN / name).read_bytes()
    columns = decode_columns(data, include_headers=True, topic=name, partition=0)
    wanted = [r for b in EXPECTED[name]["batches"] if b["control"] is None for r in b["records"]]
    assert columns.offsets.tolist() == [r["offset"] for r in wanted]
    assert columns.keys.to_pylist() == [_bytes(r["key"]) for r in wanted]
    assert columns.values.to_pylist() == [_bytes(r["value"]) for r in wanted]
    assert columns.timestamps_ms.tolist() == [r["timestamp_ms"] for r in wanted]
    got_headers = [None if h is None else [(e["key"], e["value"]) for e in h]
                   for h in columns.headers.to_pylist()]
    assert got_headers == [None if not r["headers"] else [(k, _bytes(v)) for k, v in r["headers"]]
                           for r in wanted]


def test_read_committed_drops_the_aborted_transaction() -> None:
    data = (GOLDEN / "golden-txn.bin").read_bytes()
    columns = decode_columns(data, topic="golden-txn", partition=0)
    producer_id = int(columns.batches.producer_ids[0])
    aborted_first_offset = next(b["records"][0]["offset"]
                                for b in EXPECTED["golden-txn.bin"]["batches"]
                                if b["control"] is None and b["records"][0]["offset"] > 0)
    committed = filter_committed(columns, [(producer_id, aborted_first_offset)])
    assert committed.offsets.tolist() == [0, 1]


def test_a_flipped_bit_in_a_broker_batch_fails_the_crc_and_names_the_partition() -> None:
    data = bytearray((GOLDEN / "golden-zstd.bin").read_bytes())
    data[-3] ^= 0x10
    with pytest.raises(CorruptRecordError, match="golden-zstd") as caught:
        list(iter_batches(bytes(data), topic="golden-zstd", partition=0))
    assert "CRC" in str(caught.value)

"""How large a batch the producer lets its accumulator open, without a broker."""

from __future__ import annotations

from kafka_ds.client.producer import Producer
from kafka_ds.protocol.accumulator import RECORD_OVERHEAD_BOUND
from kafka_ds.protocol.compression import Compression

VALUE = b"x" * 1_000
SIZE = RECORD_OVERHEAD_BOUND + len(VALUE)


def test_batches_of_well_compressed_records_stop_at_max_request_size() -> None:
    """The ratio estimate scales batch.size up for data that compresses well (as Java's
    does); the producer stops a batch's uncompressed records at max.request.size."""
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "compression.type": "zstd",
                         "batch.size": "16384", "max.request.size": "100000"})
    try:
        accumulator = producer._accumulator
        for _ in range(1_000):  # the estimate after many batches compressed 1:100
            accumulator.ratios.observe("t", Compression.ZSTD, 0.01)
        assert accumulator.ratios.batch_limit_bytes("t", Compression.ZSTD, 16_384) > 1_000_000
        first = None
        for index in range(2_000):  # 2 MB of records to one partition
            appended = accumulator.append("t", 0, None, VALUE, index, None, SIZE, now_ms=0)
            assert appended is not None
            batch = appended[0]
            first = first or batch
            if batch is not first:
                break
        assert first is not None and first.closed
        assert 100_000 - SIZE < first.size_bytes <= 100_000
    finally:
        producer.close(0)

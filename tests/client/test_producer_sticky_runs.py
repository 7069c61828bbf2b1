"""send()'s sticky runs of unkeyed records, without a broker: each run fills one batch.

The producer gets its topic's metadata planted (no broker answers at 127.0.0.1:1) and a
long linger.ms, so every batch stays in the accumulator. The oracle is arithmetic on the
documented bound of a record's size (``RECORD_OVERHEAD_BOUND`` + value bytes) and the
batch's limit: how many batches N records need when each one is filled.
"""

from __future__ import annotations

import math

import pytest

from kafka_ds.client.producer import Producer
from kafka_ds.client.sender import TopicMeta
from kafka_ds.protocol.accumulator import RECORD_OVERHEAD_BOUND
from kafka_ds.protocol.compression import Compression


def _batches(producer: Producer) -> list[tuple[int, int, int]]:
    """(partition, records, limit bytes) of every batch, in each partition's order."""
    with producer._lock:
        return [(partition, len(batch.values), batch.limit_bytes)
                for partition, queue in sorted(producer._accumulator._queues["t"].items())
                for batch in queue]


def _producer(**props: str) -> Producer:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": "60000",
                         "enable.idempotence": "false", "batch.size": "16384", **props})
    producer._sender.topic_meta = {"t": TopicMeta(8, tuple(range(8)))}
    return producer


@pytest.mark.parametrize("value_bytes", [100, 1000])
def test_unkeyed_runs_fill_their_batches(value_bytes: int) -> None:
    """Before, a run ended a record or two past the batch's limit: each run left a batch of
    one or two records on its partition, which went out alone if linger.ms passed first."""
    producer = _producer()
    records = 3000 if value_bytes == 100 else 400
    try:
        for _ in range(records):
            producer.send("t", b"x" * value_bytes)
        batches = _batches(producer)
    finally:
        producer.close(0)
    limit = batches[0][2]
    per_batch = limit // (RECORD_OVERHEAD_BOUND + value_bytes)
    assert len(batches) == math.ceil(records / per_batch)
    assert sum(count for _, count, _ in batches) == records
    assert sorted(count for _, count, _ in batches)[1:] == [per_batch] * (len(batches) - 1)
    assert len({partition for partition, _, _ in batches}) > 1  # it did switch


def test_compressed_runs_fill_the_batch_the_ratio_estimate_allows() -> None:
    """With compression a batch may hold batch.size divided by the estimated ratio; the run
    used to stop at batch.size of uncompressed bytes, so batches went out a quarter full at a
    ratio of 0.25 (the Java client counts estimated compressed bytes too)."""
    producer = _producer(**{"compression.type": "lz4"})
    accumulator = producer._accumulator
    accumulator.ratios._ratios[("t", Compression.LZ4)] = 0.25  # as after compressible batches
    records = 2000
    try:
        for _ in range(records):
            producer.send("t", b"x" * 100)
        batches = _batches(producer)
    finally:
        producer.close(0)
    limit = batches[0][2]
    assert limit > 3 * 16384  # the estimate took the limit far above batch.size
    per_batch = limit // (RECORD_OVERHEAD_BOUND + 100)
    assert len(batches) == math.ceil(records / per_batch)
    assert sorted(count for _, count, _ in batches)[1:] == [per_batch] * (len(batches) - 1)


def test_send_many_runs_fill_their_batches() -> None:
    """send_many() ended its runs after batch.size of record bytes, past the batch's limit:
    a spill of one record per run."""
    producer = _producer()
    records = 3000
    try:
        for _ in range(0, records, 500):
            producer.send_many("t", [b"x" * 100] * 500)
        batches = _batches(producer)
    finally:
        producer.close(0)
    per_batch = batches[0][2] // (RECORD_OVERHEAD_BOUND + 100)
    assert len(batches) == math.ceil(records / per_batch)
    assert sorted(count for _, count, _ in batches)[1:] == [per_batch] * (len(batches) - 1)

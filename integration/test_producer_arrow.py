"""``Producer.send_arrow`` against a real broker, read back with confluent-kafka.

Keyed records must land where librdkafka's Java-compatible partitioner puts the same keys;
every record (null keys and values, headers, per-record timestamps, explicit partitions)
must come back as sent, in order per partition, under every codec; a columnar batch the
broker finds too large is split and still delivered once, in order; inside a transaction the
records stay invisible to read_committed readers until another process commits.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import confluent_partitions, read_all, read_committed
from kafka_ds.client.producer import Producer, complete_transaction
from kafka_ds.protocol.arrow_batches import HEADERS_TYPE
from kafka_ds.protocol.errors import BrokerError


def _columns(count: int) -> tuple[list, list, list, list]:
    base_ms = int(time.time() * 1000) - 3_600_000
    keys = [None if i % 7 == 3 else f"key-{i % 13}".encode() for i in range(count)]
    values = [None if i % 11 == 5 else f"value-{i}-".encode() * (1 + i % 5)
              for i in range(count)]
    headers = [[("h1", f"v{i}".encode()), ("null", None)] if i % 4 == 0 else None
               for i in range(count)]
    stamps = [base_ms + i * 17 for i in range(count)]
    return keys, values, headers, stamps


def _arrow_headers(headers: list) -> pa.Array:
    return pa.array([None if h is None else [{"key": k, "value": v} for k, v in h]
                     for h in headers], HEADERS_TYPE)


@pytest.mark.parametrize("with_headers", [True, False])  # two encoder paths
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_with_keys_nulls_headers_and_timestamps(
        kafka: KafkaCluster, topic_factory: Callable[..., str], codec: str,
        with_headers: bool) -> None:
    topic = topic_factory(partitions=3)
    keys, values, headers, stamps = _columns(2000)
    if not with_headers:
        headers = [None] * len(values)
    with Producer({"bootstrap.servers": kafka.bootstrap(), "compression.type": codec,
                   "batch.size": "20000"}) as producer:
        future = producer.send_arrow(topic, pa.array(values, pa.binary()),
                                     pa.array(keys, pa.binary()),
                                     headers=_arrow_headers(headers) if with_headers else None,
                                     timestamps_ms=pa.array(stamps, pa.int64()))
        producer.flush(30_000)
        assert future.result(10) == 2000
        if codec == "none":  # large batches (20 kB by batch.size), not one per row
            assert producer.metrics()["batch-size-avg"] > 5_000
    read = read_all(kafka.bootstrap(), topic, expect=2000)
    assert len(read) == 2000
    assert sum(r.value is None for r in read) == values.count(None)
    expected_partitions = iter(confluent_partitions(kafka.bootstrap(), topic,
                                                    [k for k in keys if k is not None]))
    by_value = {r.value: r for r in read if r.value is not None}
    for index in range(2000):
        expected_partition = next(expected_partitions) if keys[index] is not None else None
        if values[index] is None:
            continue
        record = by_value[values[index]]
        assert (record.key, record.timestamp_ms, record.headers) == \
            (keys[index], stamps[index], headers[index] or [])
        if expected_partition is not None:
            assert record.partition == expected_partition
    for partition in range(3):  # order within a partition is the order sent
        sent = [int(r.value.split(b"-")[1]) for r in read
                if r.partition == partition and r.value is not None]
        assert sent == sorted(sent)


def test_explicit_partitions_and_a_bad_one(kafka: KafkaCluster,
                                           topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        producer.send_arrow(topic, pa.array([b"a", b"b", b"c"]),
                            pa.array([b"k", b"k", b"k"]), partitions=[1, 0, 1]).result(30)
        with pytest.raises(ValueError, match=r"row 0 \(partition 5\)"):
            producer.send_arrow(topic, pa.array([b"x"]), partitions=[5])
    read = read_all(kafka.bootstrap(), topic, expect=3)
    assert [(r.partition, r.value) for r in read] == [(0, b"b"), (1, b"a"), (1, b"c")]


def test_a_columnar_batch_too_large_for_the_topic_is_split(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=1, config={"max.message.bytes": "20000"})
    values = [os.urandom(1000) for _ in range(300)]
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "300000"}) as producer:
        future = producer.send_arrow(topic, pa.array(values, pa.binary()))
        producer.flush(60_000)
        assert future.result(10) == 300
        assert producer.metrics()["batch-split-total"] >= 1
    read = read_all(kafka.bootstrap(), topic, expect=300)
    assert [r.value for r in read] == values


def test_acknowledged_batches_release_their_bytes_while_the_futures_live(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    # The Spark sink keeps every future of a task until its end: a future must not keep the
    # records it sent (their encoded section and columns). Arrow's allocator counts the bytes
    # still held: 48 MiB go through, a few MiB at most may stay.
    topic = topic_factory(partitions=2)
    sends, rows, size = 12, 4096, 1024
    before = pa.total_allocated_bytes()
    futures = []
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "524288"}) as producer:
        for send in range(sends):
            values = pa.array([bytes([send]) * size] * rows, pa.binary())
            futures.append(producer.send_arrow(topic, values))
            del values
        producer.flush(60_000)
        assert sum(future.result(10) for future in futures) == sends * rows
        held = pa.total_allocated_bytes() - before
        assert held < 8 * 1024 * 1024, f"{held} bytes still held by {len(futures)} futures"
    assert len(read_all(kafka.bootstrap(), topic, expect=sends * rows)) == sends * rows


def test_transactional_records_wait_for_the_commit(kafka: KafkaCluster,
                                                   topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=2)
    bootstrap = kafka.bootstrap()
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": f"arrow-{topic}"}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send_arrow(topic, pa.array([f"v{i}" for i in range(500)]),
                     pa.array([f"k{i}" for i in range(500)]))
        token = p.prepare_transaction()
    assert token.record_count == 500 and len(token.partitions) == 2
    assert read_all(bootstrap, topic, read_committed=True, timeout_s=3) == []
    assert complete_transaction({"bootstrap.servers": bootstrap}, token, commit=True) == \
        "committed"
    assert len(read_committed(bootstrap, topic, 500)) == 500


def test_broker_errors_for_many_records_are_summarised(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    # The broker rejects every record of the batch (INVALID_TIMESTAMP, one error each).
    topic = topic_factory(partitions=1, config={"message.timestamp.before.max.ms": "60000"})
    with Producer({"bootstrap.servers": kafka.bootstrap(), "retries": "0",
                   "enable.idempotence": "false"}) as producer:
        future = producer.send_arrow(topic, pa.array([b"x"] * 500), timestamps_ms=1_000)
        producer.flush(30_000)
        with pytest.raises(BrokerError) as error:
            future.result(10)
    message = str(error.value)
    assert "INVALID_TIMESTAMP" in message
    assert "500 record(s) rejected" in message and "and 497 more" in message
    assert message.count("record ") < 10, message


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_kafka_python_reads_what_send_arrow_writes(
        kafka: KafkaCluster, topic_factory: Callable[..., str], codec: str) -> None:
    # A second independent reader; small batches, so one encoder pass cuts many of them.
    topic = topic_factory(partitions=1)
    count = 3000
    keys = [None if i % 7 == 3 else f"key-{i}".encode() for i in range(count)]
    values = [None if i % 11 == 5 else f"value-{i}-".encode() * (1 + i % 50)
              for i in range(count)]
    with Producer({"bootstrap.servers": kafka.bootstrap(), "compression.type": codec,
                   "batch.size": "16384"}) as producer:
        future = producer.send_arrow(topic, pa.array(values, pa.binary()),
                                     pa.array(keys, pa.binary()))
        producer.flush(30_000)
        assert future.result(10) == count
    read = _kafka_python_read(kafka.bootstrap(), topic, count)
    assert [(m.key, m.value) for m in read] == list(zip(keys, values, strict=True))


def _kafka_python_read(bootstrap: str, topic: str, count: int, **config: Any) -> list[Any]:
    """Partition 0 of ``topic`` as kafka-python reads it from the start, until ``count``
    records came (or 60 s passed)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             **config)
    consumer.assign([KpTopicPartition(topic, 0)])
    read: list[Any] = []
    deadline = time.monotonic() + 60
    while len(read) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            read.extend(batch)
    consumer.close()
    return read


def test_large_lz4_batches_are_read_by_other_clients(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    # Batches as the Spark sink sends them (batch.size 512 KiB of 100 B records): LZ4 frames
    # of many 64 KiB blocks, framed by us around lz4.block. The broker accepting them means
    # Java's Lz4BlockInputStream decoded them (it validates every record of a compressed
    # batch); librdkafka and kafka-python read them back here.
    import hashlib

    topic = topic_factory(partitions=1)
    count = 40_000
    values = [(b"%012d" % i + hashlib.sha256(b"%d" % (i % 4096)).hexdigest().encode() * 2)
              [:50 + i % 101] for i in range(count)]
    with Producer({"bootstrap.servers": kafka.bootstrap(), "compression.type": "lz4",
                   "batch.size": "524288", "linger.ms": "50"}) as producer:
        future = producer.send_arrow(topic, pa.array(values, pa.binary()))
        producer.flush(60_000)
        assert future.result(10) == count
        metrics = producer.metrics()
    # Compressed batches of several 64 KiB blocks each.
    assert metrics["batch-size-avg"] > 256 * 1024, metrics
    assert [r.value for r in read_all(kafka.bootstrap(), topic, expect=count)] == values
    read = _kafka_python_read(kafka.bootstrap(), topic, count, fetch_max_bytes=8 << 20,
                              max_partition_fetch_bytes=8 << 20)
    assert [m.value for m in read] == values


def test_unkeyed_records_fill_their_batches(kafka: KafkaCluster,
                                            topic_factory: Callable[..., str]) -> None:
    # The sticky partition's run ends before the record that would not fit in the batch:
    # when it ended after it, every run made a full batch and a spill of one record, and
    # batches held half of batch.size on average (twice the batches for the broker).
    topic = topic_factory(partitions=4)
    batch_size = 20_000
    values = pa.array([b"%012d" % i + b"v" * (i % 101) for i in range(20_000)])  # 12-112 B
    with Producer({"bootstrap.servers": kafka.bootstrap(),
                   "batch.size": str(batch_size)}) as producer:
        future = producer.send_arrow(topic, values)
        producer.flush(30_000)
        assert future.result(10) == 20_000
        metrics = producer.metrics()
    assert metrics["batch-size-avg"] >= 0.75 * batch_size, metrics
    assert len(read_all(kafka.bootstrap(), topic, expect=20_000)) == 20_000

"""The producer against a real broker, read back with confluent-kafka (librdkafka).

Covers every codec with every acks level (keys, null values, headers, timestamps), Java-
compatible keyed partitioning, sticky unkeyed partitioning, explicit partitions, callbacks
and metrics, and MESSAGE_TOO_LARGE: a batch split and a single oversized record.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import confluent_partitions, read_all
from kafka_ds.client.producer import Producer, RecordMetadata, RecordTooLargeError

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["0", "1", "all"]


def _records(count: int) -> list[tuple[bytes | None, bytes | None, list, int]]:
    out = []
    # Recent: the broker deletes records older than its retention (7 days) at any moment.
    base_ms = int(time.time() * 1000) - 3_600_000
    for i in range(count):
        key = None if i % 7 == 3 else f"key-{i % 13}".encode()
        value = None if i % 11 == 5 else (f"value-{i}-".encode() * (1 + i % 5))
        headers = [("h1", f"v{i}".encode()), ("empty", b""), ("null", None)] if i % 4 == 0 else []
        out.append((key, value, headers, base_ms + i * 17))
    return out


@pytest.mark.parametrize(("codec", "acks"), list(itertools.product(CODECS, ACKS)))
def test_round_trip_every_codec_and_acks(kafka: KafkaCluster,
                                         topic_factory: Callable[..., str], codec: str,
                                         acks: str) -> None:
    topic = topic_factory(partitions=3)
    records = _records(300)
    if acks == "0":
        # acks=0 hears no errors: a partition whose leader is not quite ready right after
        # creation drops records silently. Wait until every partition takes an acked write.
        with Producer({"bootstrap.servers": kafka.bootstrap()}) as warm:
            for partition in range(3):
                warm.send(topic, b"warm-up", partition=partition).result(30)
    with Producer({"bootstrap.servers": kafka.bootstrap(), "acks": acks,
                   "compression.type": codec, "linger.ms": "20"}) as producer:
        futures = [producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts)
                   for key, value, headers, ts in records]
        producer.flush(30_000)
        metadata = [future.result(10) for future in futures]
        if acks == "0":  # nothing says when the broker has appended: wait until it has
            deadline = time.monotonic() + 20
            while len(read_all(kafka.bootstrap(), topic)) < len(records) + 3 and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
    read = [r for r in read_all(kafka.bootstrap(), topic) if r.value != b"warm-up"]
    assert len(read) == len(records)
    by_value = {(r.partition, r.key, r.value, r.timestamp_ms): r for r in read}
    for (key, value, headers, ts), meta in zip(records, metadata, strict=True):
        assert isinstance(meta, RecordMetadata)
        assert meta.topic == topic and meta.timestamp_ms == ts
        if acks == "0":
            assert meta.offset == -1
        got = by_value[(meta.partition, key, value, ts)]
        if acks != "0":
            assert got.offset == meta.offset
        assert got.headers == headers
    # Per partition, records arrive in the order they were sent.
    for partition in {m.partition for m in metadata}:
        sent = [r[3] for r, m in zip(records, metadata, strict=True) if m.partition == partition]
        assert [r.timestamp_ms for r in read if r.partition == partition] == sent


def test_keyed_partitioning_matches_java_default(kafka: KafkaCluster,
                                                 topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=7)
    keys = [f"user-{i}".encode() for i in range(300)] + [b"", b"a", b"\x00\xff" * 9, "été".encode()]
    expected = confluent_partitions(kafka.bootstrap(), topic, keys)
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        futures = [producer.send(topic, b"ours", key=key) for key in keys]
        producer.flush()
        ours = [future.result().partition for future in futures]
    assert ours == expected
    assert len(set(ours)) == 7


def test_unkeyed_records_stick_to_a_partition_per_batch(kafka: KafkaCluster,
                                                        topic_factory: Callable[..., str]
                                                        ) -> None:
    topic = topic_factory(partitions=4)
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "16384",
                   "linger.ms": "50"}) as producer:
        futures = [producer.send(topic, b"x" * 100) for _ in range(3000)]
        producer.flush()
        partitions = [future.result().partition for future in futures]
    runs = [len(list(group)) for _, group in itertools.groupby(partitions)]
    # ~16 KiB of ~117-byte records per partition before switching: long runs, several
    # partitions used, never alternating record by record.
    assert len(set(partitions)) >= 2
    assert min(runs[:-1]) >= 100, runs
    assert len(runs) <= 3000 * 117 // 16384 + 2


def test_explicit_partition_wins(kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        futures = [producer.send(topic, b"v", key=b"same-key", partition=i % 3) for i in range(30)]
        producer.flush()
        assert [f.result().partition for f in futures] == [i % 3 for i in range(30)]
        with pytest.raises(ValueError, match="has 3 partitions"):
            producer.send(topic, b"v", partition=3)
    read = read_all(kafka.bootstrap(), topic)
    assert sorted(r.partition for r in read) == sorted(i % 3 for i in range(30))


def test_callbacks_futures_and_metrics(kafka: KafkaCluster, topic: str) -> None:
    delivered: list[tuple[RecordMetadata | None, BaseException | None]] = []
    done = threading.Event()
    chained = []
    with Producer({"bootstrap.servers": kafka.bootstrap(), "compression.type": "lz4"}) as p:
        for _ in range(500):
            future = p.send(topic, b"abc" * 50, callback=lambda m, e: delivered.append((m, e)))
        future.add_done_callback(lambda f: (chained.append(f.result()), done.set()))
        p.flush()
        assert done.wait(10)
        metrics = p.metrics()
    assert len(delivered) == 500 and all(e is None for _, e in delivered)
    assert [m.offset for m, _ in delivered] == list(range(500))
    assert chained[0].offset == 499
    assert metrics["record-send-total"] == 500
    assert metrics["record-send-rate"] > 0
    assert metrics["batch-size-avg"] > 0
    assert 0 < metrics["compression-rate-avg"] < 0.5  # repetitive values compress well
    assert metrics["record-error-total"] == 0
    assert metrics["record-retry-total"] == 0
    assert metrics["request-latency-avg"] >= 0


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_message_too_large_splits_the_batch(kafka: KafkaCluster,
                                            topic_factory: Callable[..., str],
                                            codec: str) -> None:
    topic = topic_factory(partitions=1, config={"max.message.bytes": "20000"})
    values = [bytes([i % 251]) * 1000 + i.to_bytes(4, "big") for i in range(400)]
    if codec == "zstd":
        import os
        values = [os.urandom(1000) for _ in range(400)]  # incompressible: the estimate is off
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "300000",
                   "linger.ms": "200", "compression.type": codec}) as producer:
        futures = [producer.send(topic, value) for value in values]
        producer.flush()
        offsets = [future.result().offset for future in futures]
        metrics = producer.metrics()
    assert offsets == list(range(400))
    assert metrics["batch-split-total"] >= 1
    read = read_all(kafka.bootstrap(), topic)
    assert [r.value for r in read] == values  # every record once, in order


def test_single_record_over_the_limit_fails_with_its_size(kafka: KafkaCluster,
                                                          topic_factory: Callable[..., str]
                                                          ) -> None:
    topic = topic_factory(partitions=1, config={"max.message.bytes": "5000"})
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        big = producer.send(topic, b"x" * 10_000)
        small = producer.send(topic, b"fits")
        with pytest.raises(RecordTooLargeError,
                           match=r"10\d\d\d bytes.*max\.message\.bytes \(5000 bytes\)"):
            big.result(30)
        assert small.result(30).offset >= 0
        with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
            producer.send(topic, b"y" * 2_000_000)
    assert [r.value for r in read_all(kafka.bootstrap(), topic)] == [b"fits"]


def test_send_many_columns(kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    """The bulk path: keyed records land where send() would put them, unkeyed ones stick,
    an explicit partition wins, and the result reports the count once all are acked."""
    from kafka_ds.protocol.partitioner import partition_for_key

    topic = topic_factory(partitions=4)
    keys = [f"k{i % 97}".encode() for i in range(3000)]
    keyed = [f"keyed-{i}".encode() for i in range(3000)]
    unkeyed = [b"u" * 100 + str(i).encode() for i in range(5000)]
    with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "10"}) as producer:
        results = [producer.send_many(topic, keyed, keys=keys),
                   producer.send_many(topic, unkeyed),
                   producer.send_many(topic, [b"p2"] * 10, partition=2),
                   producer.send_many(topic, [b"n1", b"n2"], keys=[None, b"x"])]
        assert [r.result(30) for r in results] == [3000, 5000, 10, 2]
        assert producer.metrics()["record-send-total"] == 8012
    read = read_all(kafka.bootstrap(), topic)  # to the end: extras would show
    assert len(read) == 8012
    where = {r.value: r.partition for r in read}
    assert all(where[v] == partition_for_key(k, 4) for k, v in zip(keys, keyed, strict=True))
    for partition in range(4):  # per partition, in the order given
        mine = [r.value for r in read if r.partition == partition and r.value in set(keyed)]
        assert mine == [v for k, v in zip(keys, keyed, strict=True)
                        if partition_for_key(k, 4) == partition]
    runs = [len(list(group)) for _, group in itertools.groupby(where[v] for v in unkeyed)]
    assert len(runs) > 1 and min(runs[:-1]) >= 100
    assert {where[b"p2"]} == {2}

"""Keyed records and records given a partition on send()'s lane, against a real broker.

The oracle is librdkafka: its Java-compatible partitioner (``murmur2_random``) picks the
partition of each key, and confluent-kafka reads the topic back.
"""

from __future__ import annotations

from collections.abc import Callable

from integration.harness.cluster import KafkaCluster
from integration.producer_util import confluent_partitions, read_all
from kafka_ds.client.producer import Producer


def test_keyed_lane_matches_librdkafka_and_keeps_order(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    """Many rounds over the same keys (after the first record of a batch, the rest take the
    lane), interleaved with records given a partition: each keyed record lands where
    librdkafka's murmur2 partitioner puts its key, and each partition reads back in send
    order."""
    topic = topic_factory(partitions=7)
    keys = [f"user-{i}".encode() for i in range(97)] + [b"", b"a", "été".encode()]
    expected = dict(zip(keys, confluent_partitions(kafka.bootstrap(), topic, keys),
                        strict=True))
    sent: list[tuple[bytes | None, bytes, int | None]] = []
    for i in range(4_000):
        if i % 9 == 4:
            sent.append((None, f"given-{i}".encode(), i % 7))
        else:
            sent.append((keys[i % len(keys)], f"keyed-{i}".encode(), None))
    with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "20",
                   "compression.type": "lz4"}) as producer:
        futures = [producer.send(topic, value, key=key, partition=partition)
                   for key, value, partition in sent]
        producer.flush(60_000)
        partitions = [future.result(30).partition for future in futures]
    for (key, _, partition), got in zip(sent, partitions, strict=True):
        assert got == (partition if partition is not None else expected[key]), key
    read = [r for r in read_all(kafka.bootstrap(), topic, expect=4_000 + len(keys))
            if r.value != b"x"]  # confluent_partitions' records
    assert len(read) == len(sent)
    for partition in range(7):
        in_order = [(key, value) for (key, value, _), got in zip(sent, partitions, strict=True)
                    if got == partition]
        assert [(r.key, r.value) for r in read if r.partition == partition] == in_order

"""send()'s lane for keyed records and records given a partition, without a broker.

The producer gets its topic's metadata planted (no broker answers at 127.0.0.1:1), so every
record stays in the accumulator, where the tests read which partition, batch and position it
took. The partition oracle is the Java client: ``Utils.murmur2`` values computed on the JVM
(the same table as tests/protocol/test_partitioner.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kafka_ds.client.producer import Producer
from kafka_ds.client.sender import TopicMeta
from kafka_ds.protocol.errors import KafkaTimeoutError

# key, toPositive(Utils.murmur2(key)) % 7, % 1000: kafka-clients 4.4.0 on the JVM.
JAVA_PARTITIONS = [
    ("", 2, 681), ("a", 5, 524), ("ab", 0, 434), ("abc", 4, 107), ("abcd", 5, 100),
    ("21", 3, 340), ("foobar", 0, 166), ("a-little-bit-long-string", 1, 112),
    ("key-0", 0, 41), ("key-1", 5, 640), ("key-12345", 0, 733), ("été", 4, 73),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 3, 677),
]


def _producer(partitions: int = 7, **props: str) -> Producer:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "linger.ms": "60000", **props})
    producer._sender.topic_meta = {"t": TopicMeta(partitions, tuple(range(partitions)))}
    return producer


@pytest.fixture
def producer() -> Iterator[Producer]:
    made = _producer()
    yield made
    made.close(0)


def _count_full_sends(producer: Producer, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Calls of send()'s full path, recorded (the lane's misses)."""
    calls: list[Any] = []
    full = producer._send

    def counted(*args: Any) -> Any:
        calls.append(args)
        return full(*args)

    monkeypatch.setattr(producer, "_send", counted)
    return calls


def test_keyed_records_take_the_lane_to_javas_partition(
        producer: Producer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key lands where Java's default partitioner puts it, and after the first record
    of each partition's batch the rest skip the full path."""
    full_sends = _count_full_sends(producer, monkeypatch)
    futures = [(key, expected, producer.send("t", f"v{round_}".encode(), key=key.encode()))
               for round_ in range(20) for key, expected, _ in JAVA_PARTITIONS]
    for key, expected, future in futures:
        batch, index = future
        assert batch.partition == expected, key
        assert batch.keys is not None and batch.keys[index] == key.encode()
    # One full send per partition the keys reach (the batch's first record), no more.
    assert len(full_sends) == len({expected for _, expected, _ in JAVA_PARTITIONS})


def test_keyed_lane_keeps_the_order_of_each_partition(
        producer: Producer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records interleaved over keys, explicit partitions and unkeyed ones: each partition's
    batches hold its records in send order, keys and values paired."""
    full_sends = _count_full_sends(producer, monkeypatch)
    sent: dict[int, list[tuple[bytes | None, bytes]]] = {}
    for i in range(3_000):
        key: bytes | None = JAVA_PARTITIONS[i % len(JAVA_PARTITIONS)][0].encode()
        partition: int | None = None
        if i % 5 == 0:
            partition, key = i % 7, None
        elif i % 5 == 1:
            partition = i % 7  # an explicit partition wins over the key
        value = f"value-{i}".encode()
        batch, _ = producer.send("t", value, key=key, partition=partition)
        sent.setdefault(batch.partition, []).append((key, value))
    assert len(full_sends) < 100  # ~3000 records: nearly all on the lane
    queues = producer._accumulator._queues["t"]
    for partition, records in sent.items():
        stored = [(batch.keys[i] if batch.keys is not None else None, value)
                  for batch in queues[partition] for i, value in enumerate(batch.values)]
        assert stored == records, partition


def test_new_partition_count_changes_the_keyed_partition(
        producer: Producer) -> None:
    """Partitions added to the topic: the next record hashes modulo the new count (the lane
    built for 7 partitions is not used with the new metadata)."""
    key, mod7, mod1000 = JAVA_PARTITIONS[1]
    assert producer.send("t", b"v", key=key.encode())[0].partition == mod7
    assert producer.send("t", b"v", key=key.encode())[0].partition == mod7
    producer._sender.topic_meta = {"t": TopicMeta(1000, tuple(range(1000)))}
    assert producer.send("t", b"v", key=key.encode())[0].partition == mod1000
    assert producer.send("t", b"v", key=key.encode())[0].partition == mod1000


def test_explicit_partition_out_of_range_is_refused_on_the_lane(producer: Producer) -> None:
    producer.send("t", b"v", partition=6)
    producer.send("t", b"v", key=b"k", partition=6)
    with pytest.raises(ValueError, match=r"partition 7 does not exist.*has 7 partitions"):
        producer.send("t", b"v", key=b"k", partition=7)
    with pytest.raises(ValueError, match="partition -1 does not exist"):
        producer.send("t", b"v", partition=-1)


def test_keyed_lane_respects_buffer_memory() -> None:
    """The lane never lets the accumulator pass buffer.memory: the record that would pass it
    waits in the full path, and with no broker to free memory times out after max.block.ms."""
    producer = _producer(**{"buffer.memory": "20000", "max.block.ms": "200"})
    try:
        with pytest.raises(KafkaTimeoutError, match=r"buffer\.memory"):
            for _ in range(1_000):
                producer.send("t", b"x" * 100, key=b"same-key")
        assert producer._accumulator.used_bytes <= 20_000
    finally:
        producer.close(0)


def test_keyed_lane_refuses_after_close(producer: Producer) -> None:
    producer.send("t", b"v", key=b"k")
    producer.close(0)
    with pytest.raises(Exception, match="closed producer"):
        producer.send("t", b"v", key=b"k")


def test_ignore_keys_sends_keyed_records_to_the_sticky_partition() -> None:
    """partitioner.ignore.keys: keyed records are partitioned as unkeyed ones (one sticky
    partition for a batch's worth), not by their hash."""
    producer = _producer(**{"partitioner.ignore.keys": "true"})
    try:
        partitions = {producer.send("t", b"v", key=key.encode())[0].partition
                      for key, _, _ in JAVA_PARTITIONS}
        assert len(partitions) == 1
    finally:
        producer.close(0)

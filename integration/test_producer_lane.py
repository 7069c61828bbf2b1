"""send()'s lane (the common record appended straight to the open batch) against a real broker.

The sticky lane takes unkeyed ``bytes`` values without headers, partition or timestamp; keyed
records and records given a partition take the partition lane (test_producer_keyed_lane.py);
records with headers or a timestamp, and the first of each batch, take the full path. These
tests mix them on the same partitions and read everything back with confluent-kafka
(librdkafka): every record once, in send order per partition, with its key, headers,
timestamp and the offset its future and its callback reported; keyed records where Java's
murmur2 puts them (librdkafka's ``murmur2_random``); and the refusals the full path makes
(closed producer, record larger than max.request.size, spoilt transaction) made by the lane
too.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import confluent_partitions, read_all
from kafka_ds.client.producer import Producer, RecordMetadata, RecordTooLargeError
from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.txn_state import TransactionAbortableError, TxnState

Sent = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None, int | None]


def _shape(i: int) -> Sent:
    """Record i: (key, value, headers, partition, timestamp_ms); most take the lane."""
    value = f"value-{i}-".encode() * (1 + i % 4)
    kind = i % 10
    if kind == 1:
        return (f"key-{i % 17}".encode(), value, [], None, None)  # keyed: murmur2
    if kind == 3:
        return (None, value, [("h", f"{i}".encode()), ("null", None)], None, None)
    if kind == 5:
        return (None, value, [], 2, None)  # explicit partition
    if kind == 7:
        return (None, None if i % 20 == 7 else value, [], None,
                int(time.time() * 1000) - 60_000 + i)  # own timestamp (and tombstones)
    return (None, value, [], None, None)  # the lane's shape


def test_lane_and_full_path_mixed_keep_every_field_and_the_order(
        kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(partitions=3)
    records = [_shape(i) for i in range(4000)]
    delivered: dict[int, RecordMetadata] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def on_delivery(i: int) -> Callable[[RecordMetadata | None, BaseException | None], None]:
        def record(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            with lock:
                if error is not None:
                    errors.append(error)
                elif metadata is not None:
                    delivered[i] = metadata
        return record

    windows: list[tuple[int, int]] = []
    futures = []
    # A small batch.size: batches fill and the sticky partition switches many times over.
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "4096",
                   "linger.ms": "5", "compression.type": "lz4"}) as producer:
        for i, (key, value, headers, partition, timestamp_ms) in enumerate(records):
            before_ms = time.time_ns() // 1_000_000
            futures.append(producer.send(topic, value, key=key, headers=headers or None,
                                         partition=partition, timestamp_ms=timestamp_ms,
                                         callback=on_delivery(i) if i % 3 == 0 else None))
            windows.append((before_ms, time.time_ns() // 1_000_000))
        producer.flush(60_000)
        metadata = [future.result(30) for future in futures]
    assert errors == []
    assert {i: metadata[i] for i in delivered} == delivered
    assert sorted(delivered) == list(range(0, len(records), 3))

    read = read_all(kafka.bootstrap(), topic, expect=len(records))
    assert len(read) == len(records)
    by_place = {(r.partition, r.offset): r for r in read}
    for i, ((key, value, headers, partition, timestamp_ms), meta) in enumerate(
            zip(records, metadata, strict=True)):
        got = by_place[(meta.partition, meta.offset)]
        assert (got.key, got.value, got.headers) == (key, value, headers), i
        if partition is not None:
            assert meta.partition == partition
        if timestamp_ms is None:
            assert windows[i][0] <= got.timestamp_ms <= windows[i][1], (i, got, windows[i])
        else:
            assert got.timestamp_ms == timestamp_ms
        assert meta.timestamp_ms == got.timestamp_ms
    # Per partition, the records are in the order they were sent.
    for p in range(3):
        sent = [i for i, meta in enumerate(metadata) if meta.partition == p]
        assert [metadata[i].offset for i in sent] == sorted(metadata[i].offset for i in sent)
    # Keyed records land where Java's partitioner puts them.
    keyed = [(i, r[0]) for i, r in enumerate(records) if r[0] is not None]
    expected = confluent_partitions(kafka.bootstrap(), topic, [key for _, key in keyed])
    assert [metadata[i].partition for i, _ in keyed] == expected
    # Unkeyed records still stick to a partition for about batch.size bytes at a time.
    unkeyed = [metadata[i].partition for i, r in enumerate(records)
               if r[0] is None and r[3] is None]
    runs = [len(list(group)) for _, group in itertools.groupby(unkeyed)]
    assert len(set(unkeyed)) >= 2 and len(runs) >= 10
    assert sorted(runs)[len(runs) // 2] >= 20, runs


def test_the_lane_refuses_a_record_over_max_request_size(kafka: KafkaCluster,
                                                         topic: str) -> None:
    # batch.size above max.request.size: the open batch has room for a record send() must
    # refuse.
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "65536",
                   "max.request.size": "4096", "linger.ms": "50"}) as producer:
        first = producer.send(topic, b"small")
        second = producer.send(topic, b"small too")  # through the lane
        with pytest.raises(RecordTooLargeError, match=r"max\.request\.size \(4096 bytes\)"):
            producer.send(topic, b"x" * 5000)
        producer.flush()
        assert second.result(10).offset == first.result(10).offset + 1
    assert [r.value for r in read_all(kafka.bootstrap(), topic)] == [b"small", b"small too"]


def test_send_after_close_is_refused_by_the_lane_too(kafka: KafkaCluster, topic: str) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "50"})
    producer.send(topic, b"one")
    producer.send(topic, b"two")
    producer.close()
    with pytest.raises(KafkaDsError, match="closed producer"):
        producer.send(topic, b"three")
    assert [r.value for r in read_all(kafka.bootstrap(), topic)] == [b"one", b"two"]


def test_the_lane_refuses_once_the_transaction_is_spoilt(kafka: KafkaCluster,
                                                         topic: str) -> None:
    with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "1000",
                   "transactional.id": f"lane-{uuid.uuid4().hex}"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"opens the batch")
        producer.send(topic, b"through the lane")
        txn: Any = producer._txn
        assert txn is not None
        # What the sender does when a Produce fails with an abortable error, while the batch
        # the lane appends to is still open (linger.ms).
        txn.fail(KafkaDsError("injected: a batch of this transaction failed"))
        assert producer.transaction_state is TxnState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.send(topic, b"refused")
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"next transaction")
        producer.commit_transaction()
    committed = read_all(kafka.bootstrap(), topic, read_committed=True)
    assert [r.value for r in committed] == [b"next transaction"]

"""Keyed records and records given a partition on send()'s lane, against a real broker.

The oracle is librdkafka: its Java-compatible partitioner (``murmur2_random``) picks the
partition of each key, and confluent-kafka reads the topic back. The refusals the full path
makes (record over max.request.size, spoilt transaction) are made by this lane too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import confluent_partitions, read_all
from kafka_ds.client.producer import Producer, RecordTooLargeError
from kafka_ds.protocol.errors import KafkaDsError
from kafka_ds.protocol.txn_state import TransactionAbortableError, TxnState


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


# (key, partition) of records that take the keyed lane, and of ones given a partition.
SHAPES = [(b"user-1", None), (None, 0), (b"user-1", 0)]


@pytest.mark.parametrize(("key", "partition"), SHAPES)
def test_the_keyed_lane_refuses_a_record_over_max_request_size(
        kafka: KafkaCluster, topic: str, key: bytes | None, partition: int | None) -> None:
    """batch.size above max.request.size: the open batch has room for a record send() must
    refuse, naming max.request.size."""
    with Producer({"bootstrap.servers": kafka.bootstrap(), "batch.size": "65536",
                   "max.request.size": "4096", "linger.ms": "50"}) as producer:
        first = producer.send(topic, b"small", key=key, partition=partition)
        second = producer.send(topic, b"small too", key=key, partition=partition)  # lane
        with pytest.raises(RecordTooLargeError, match=r"max\.request\.size \(4096 bytes\)"):
            producer.send(topic, b"x" * 5000, key=key, partition=partition)
        producer.flush()
        assert second.result(10).offset == first.result(10).offset + 1
    assert [(r.key, r.value) for r in read_all(kafka.bootstrap(), topic)] == [
        (key, b"small"), (key, b"small too")]


@pytest.mark.parametrize(("key", "partition"), SHAPES)
def test_the_keyed_lane_refuses_once_the_transaction_is_spoilt(
        kafka: KafkaCluster, topic: str, key: bytes | None, partition: int | None) -> None:
    with Producer({"bootstrap.servers": kafka.bootstrap(), "linger.ms": "1000",
                   "transactional.id": f"keyed-lane-{uuid.uuid4().hex}"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"opens the batch", key=key, partition=partition)
        producer.send(topic, b"through the lane", key=key, partition=partition)
        txn: Any = producer._txn
        # What the sender does when a Produce of the transaction fails with an abortable
        # error while the batch the lane appends to is still open (linger.ms).
        txn.fail(KafkaDsError("injected: a batch of this transaction failed"))
        assert producer.transaction_state is TxnState.ABORTABLE_ERROR
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.send(topic, b"refused", key=key, partition=partition)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"next transaction", key=key, partition=partition)
        producer.commit_transaction()
    committed = read_all(kafka.bootstrap(), topic, read_committed=True)
    assert [r.value for r in committed] == [b"next transaction"]

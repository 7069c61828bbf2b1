"""Helpers for the producer tests: read a topic back with the independent client (librdkafka)."""

from __future__ import annotations

import time
from typing import Any, NamedTuple


class ReadRecord(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int


def read_all(bootstrap: str, topic: str, *, read_committed: bool = False,
             timeout_s: float = 30.0, expect: int | None = None) -> list[ReadRecord]:
    """Every record of ``topic`` (all partitions, from the start to the end offsets at call
    time) read by confluent-kafka, in partition then offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "enable.partition.eof": True,
    })
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        ends = {}
        for partition in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            ends[partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[ReadRecord] = []
        done = {p for p, high in ends.items() if high == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                # _PARTITION_EOF (-191): at the end (read_committed: at the last stable offset)
                if message.error().code() == -191 and (
                        message.offset() >= ends[message.partition()] or read_committed):
                    done.add(message.partition())
                continue
            out.append(ReadRecord(message.partition(), message.offset(), message.key(),
                                  message.value(), list(message.headers() or []),
                                  message.timestamp()[1]))
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
            if expect is not None and len(out) >= expect:
                break
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, expect: int,
                   timeout_s: float = 60.0) -> list[ReadRecord]:
    """``read_all`` at read_committed until ``expect`` records are visible (or time is up).

    A committed transaction becomes visible when its markers are written, a moment after
    EndTxn answered: a read right after a commit may stop early at the last stable offset.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_all(bootstrap, topic, read_committed=True, expect=expect,
                           timeout_s=max(deadline - time.monotonic(), 1.0))
        if len(records) >= expect or time.monotonic() >= deadline:
            return records
        time.sleep(0.2)


def confluent_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> list[int]:
    """The partition librdkafka's Java-compatible partitioner (murmur2_random) picks per key,
    from the delivery reports of real sends."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "linger.ms": 5})
    result: dict[int, int] = {}

    def report(index: int) -> Any:
        def on_delivery(error: Any, message: Any) -> None:
            assert error is None, error
            result[index] = message.partition()
        return on_delivery

    for index, key in enumerate(keys):
        producer.produce(topic, b"x", key=key, on_delivery=report(index))
        producer.poll(0)
    producer.flush(30)
    return [result[index] for index in range(len(keys))]


def wait_until_stable(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Poll until no transaction is open on ``topic``: each partition's last stable offset
    (ListOffsets at read_committed) equals its high watermark. A transaction's markers are
    written after EndTxn returns (under transactions v1) or after the coordinator times it
    out, so "committed" or "aborted" is not visible to readers at once."""
    from kafka_ds.client import offsets
    from kafka_ds.client.cluster import Cluster
    from kafka_ds.client.config import ClientConfig
    from kafka_ds.protocol.types import IsolationLevel

    deadline = time.monotonic() + timeout_s
    with Cluster.connect(ClientConfig.from_properties({"bootstrap.servers": bootstrap})) as c:
        partitions = offsets.partitions_of(c, [topic])
        while True:
            stable = offsets.latest_offsets(c, partitions,
                                            isolation_level=IsolationLevel.READ_COMMITTED)
            high = offsets.latest_offsets(c, partitions)
            if stable == high:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: last stable offsets {stable} did not reach the "
                                     f"high watermarks {high} within {timeout_s} s")
            time.sleep(0.05)


# --- run in other OS processes (multiprocessing "spawn": module-level functions) -----------

def prepare_elsewhere(bootstrap: str, topic: str, transactional_id: str, count: int,
                      transaction_timeout_ms: int = 60_000, partitions: int = 1) -> Any:
    """Produce ``count`` records in a transaction and prepare it; returns the token."""
    from kafka_ds.client.producer import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": str(transaction_timeout_ms)})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(count):
            producer.send(topic, f"prepared-{i}".encode(), partition=i % partitions)
        return producer.prepare_transaction()
    finally:
        producer.close()


def complete_elsewhere(bootstrap: str, token: Any, commit: bool) -> str:
    from kafka_ds.client.transactions import complete_transaction

    return complete_transaction({"bootstrap.servers": bootstrap}, token, commit, 30_000)


def in_other_process(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a fresh interpreter (spawn), its result pickled back."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)

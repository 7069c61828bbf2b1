"""Helpers for the fetcher's real-broker tests: write with confluent-kafka, read it back.

confluent-kafka (librdkafka) is the independent client: what it writes we read, and what it
reads is what our Arrow output must equal row for row.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from integration.harness.cluster import KafkaCluster

# librdkafka's timestamp types -> Kafka's ids (Spark's timestampType column).
_TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}


def produce(cluster: KafkaCluster, topic: str, records: list[dict[str, Any]],
            **config: Any) -> None:
    """Write ``records`` (dicts of produce() kwargs: value, key, partition, headers...)."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "linger.ms": 5, **config})
    for index, record in enumerate(records):
        producer.produce(topic, **record)
        if index % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not delivered"


def produce_values(cluster: KafkaCluster, topic: str, count: int, partition: int = 0,
                   value_bytes: int = 100, **config: Any) -> None:
    pad = b"x" * max(0, value_bytes - 8)
    produce(cluster, topic, [{"value": b"%08d" % i + pad, "key": b"k%d" % i,
                              "partition": partition} for i in range(count)], **config)


def confluent_rows(cluster: KafkaCluster, topic: str, partition: int, start: int, end: int,
                   isolation: str = "read_uncommitted", timeout_s: float = 60.0,
                   **config: Any) -> list[dict[str, Any]]:
    """Rows in ``[start, end)`` as librdkafka reads them, shaped like our Arrow rows
    (``config``: librdkafka settings, e.g. ``cluster.librdkafka_config(listener)``)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, **config})
    consumer.assign([CTopicPartition(topic, partition, start)])
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    if message.offset() >= end:
                        break
                    continue
                raise RuntimeError(str(message.error()))
            if message.offset() >= end:
                break
            kind, timestamp_ms = message.timestamp()
            headers = message.headers()
            rows.append({
                "key": message.key(), "value": message.value(), "topic": message.topic(),
                "partition": message.partition(), "offset": message.offset(),
                "timestamp_ms": timestamp_ms, "timestampType": _TIMESTAMP_TYPES[kind],
                "headers": None if not headers else [
                    {"key": k, "value": v} for k, v in headers],
            })
            if message.offset() >= end - 1:
                break
        else:
            raise TimeoutError(f"confluent-kafka did not reach offset {end} of {topic}-{partition}")
    finally:
        consumer.close()
    return rows


def arrow_rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    """Our Arrow batches as row dicts comparable with ``confluent_rows``."""
    rows: list[dict[str, Any]] = []
    for batch in batches:
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        for row, timestamp_us in zip(batch.to_pylist(), micros, strict=True):
            del row["timestamp"]
            row["timestamp_ms"] = None if timestamp_us is None else timestamp_us // 1000
            rows.append(row)
    return rows


def by_partition(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["partition"], []).append(row)
    return grouped

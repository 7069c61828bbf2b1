"""Admin calls and offset lookups against the real broker, data written by confluent-kafka."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer as ConfluentProducer

from integration.harness.cluster import KafkaCluster
from integration.props import kafka_ds_properties
from kafka_ds.client.admin import Admin, NewTopic
from kafka_ds.client.cluster import UnknownTopicError
from kafka_ds.client.offsets import (
    earliest_offsets,
    latest_offsets,
    list_offsets,
    offsets_for_times,
    partitions_of,
)
from kafka_ds.protocol.errors import BrokerError
from kafka_ds.protocol.types import IsolationLevel, TopicPartition


@pytest.fixture
def admin(kafka: KafkaCluster) -> Iterator[Admin]:
    with Admin.from_properties(kafka_ds_properties(kafka)) as client:
        yield client


def _produce(kafka: KafkaCluster, topic: str, count: int, partition: int = 0,
             timestamp_ms: int | None = None, transactional_id: str | None = None,
             commit: bool = True) -> None:
    config = {"bootstrap.servers": kafka.bootstrap(), "linger.ms": 5}
    if transactional_id:
        config["transactional.id"] = transactional_id
    producer = ConfluentProducer(config)
    if transactional_id:
        producer.init_transactions()
        producer.begin_transaction()
    for index in range(count):
        kwargs = {"timestamp": timestamp_ms + index} if timestamp_ms is not None else {}
        producer.produce(topic, value=b"v%d" % index, partition=partition, **kwargs)
    if transactional_id:
        if commit:
            producer.commit_transaction()
        else:
            producer.flush()
            return  # left open on purpose
    producer.flush()


def test_create_describe_grow_and_delete_a_topic(admin: Admin) -> None:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    info = admin.create_topic(name, partitions=2, config={"retention.ms": "3600000"})
    assert sorted(info.partitions) == [0, 1]
    assert admin.describe_topic_config(name)["retention.ms"] == "3600000"
    with pytest.raises(BrokerError, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topic(name)
    admin.create_topic(name, exist_ok=True)
    admin.create_partitions(name, 4)
    admin.cluster.invalidate()
    assert admin.cluster.partitions_for(name) == [0, 1, 2, 3]
    admin.delete_topics([name])
    with pytest.raises(UnknownTopicError):
        admin.cluster.topic(name)
    admin.delete_topics([name], missing_ok=True)


def test_create_topic_with_invalid_config_names_it(admin: Admin) -> None:
    with pytest.raises(BrokerError, match="INVALID_CONFIG") as caught:
        admin.create_topics([NewTopic(f"bad-{uuid.uuid4().hex[:6]}", 1, 1,
                                      {"cleanup.policy": "sometimes"})])
    assert "creating topic" in str(caught.value)


def test_earliest_latest_and_by_timestamp(kafka: KafkaCluster, admin: Admin, topic_factory) -> None:
    topic = topic_factory(partitions=2)
    # Recent (ten minutes ago): the broker's time-based retention (7 days) deletes older
    # records at its next check, and the offsets asked for would then be gone.
    base_ms = (int(time.time()) // 60 - 10) * 60_000
    _produce(kafka, topic, 10, partition=0, timestamp_ms=base_ms)
    _produce(kafka, topic, 3, partition=1, timestamp_ms=base_ms)
    tps = partitions_of(admin.cluster, [topic])
    assert tps == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert earliest_offsets(admin.cluster, tps) == {tps[0]: 0, tps[1]: 0}
    assert latest_offsets(admin.cluster, tps) == {tps[0]: 10, tps[1]: 3}
    found = offsets_for_times(admin.cluster, {tps[0]: base_ms + 4, tps[1]: base_ms + 99})
    assert found == {tps[0]: 4, tps[1]: None}
    answer = list_offsets(admin.cluster, {tps[0]: base_ms + 4})[tps[0]]
    assert answer.timestamp_ms == base_ms + 4
    assert answer.leader_epoch >= 0


def test_latest_under_read_committed_is_the_last_stable_offset(kafka: KafkaCluster, admin: Admin,
                                                               topic) -> None:
    _produce(kafka, topic, 5)
    _produce(kafka, topic, 4, transactional_id=f"open-{uuid.uuid4().hex[:6]}", commit=False)
    tp = TopicPartition(topic, 0)
    assert latest_offsets(admin.cluster, [tp]) == {tp: 9}
    assert latest_offsets(admin.cluster, [tp],
                          isolation_level=IsolationLevel.READ_COMMITTED) == {tp: 5}


def test_delete_records_moves_the_log_start(kafka: KafkaCluster, admin: Admin, topic) -> None:
    _produce(kafka, topic, 20)
    tp = TopicPartition(topic, 0)
    assert admin.delete_records({tp: 7}) == {tp: 7}
    assert earliest_offsets(admin.cluster, [tp]) == {tp: 7}
    with pytest.raises(BrokerError, match="OFFSET_OUT_OF_RANGE"):
        admin.delete_records({tp: 99})


def test_lookup_on_a_missing_partition_is_named(admin: Admin, topic) -> None:
    with pytest.raises(BrokerError, match="has no partition 5"):
        earliest_offsets(admin.cluster, [TopicPartition(topic, 5)])

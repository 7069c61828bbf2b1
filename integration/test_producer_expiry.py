"""Producers the broker has forgotten: expired producer state and expired transactional ids.

A broker drops an idle producer's state on a partition after ``producer.id.expiration.ms``
(1 day by default), and its transaction coordinator forgets a transactional id unused for
``transactional.id.expiration.ms`` (7 days by default): a weekly job meets both. Here one
broker of our own expires both within seconds, and each test first shows that the expiry
happened (DescribeProducers lists no producer; DescribeTransactions answers
TRANSACTIONAL_ID_NOT_FOUND) before it checks what the next write does. What was written is
read back by confluent-kafka.

Observed on Apache Kafka 4.4 (KIP-360): a sequence from a producer whose state expired is
accepted, so UNKNOWN_PRODUCER_ID does not come back for it; an expired transactional id makes
the next transaction's Produce (transactions v2) or AddPartitionsToTxn (v1) fail with
INVALID_PRODUCER_ID_MAPPING, which the Java client (4.x) treats as fatal, as we do.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import read_all, read_committed
from kafka_ds.client.admin import Admin
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.errors import BrokerError, ErrorCode
from kafka_ds.protocol.messages.describe_producers import (
    DescribeProducersRequest,
    TopicRequest,
)
from kafka_ds.protocol.txn_state import TransactionFatalError
from kafka_ds.spark import PyKafkaDataSource

EXPIRY_MS = 2_000
# Longer for producer state: the first test checks the state is there right after its sends,
# which must come before the broker may drop it, even on a loaded machine.
PRODUCER_EXPIRY_MS = 5_000
WAIT_S = 60.0


_FORGETFUL = {"producer.id.expiration.ms": PRODUCER_EXPIRY_MS,
              "producer.id.expiration.check.interval.ms": 500,
              "transactional.id.expiration.ms": EXPIRY_MS,
              "transaction.remove.expired.transaction.cleanup.interval.ms": 500}


@pytest.fixture(scope="module")
def forgetful_kafka(kafka_version: str) -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1, version=kafka_version, broker_properties=_FORGETFUL) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def forgetful_kafka_tv1(kafka_version: str) -> Iterator[KafkaCluster]:
    """Transactions v1: the expired id is met by AddPartitionsToTxn, not by Produce."""
    with KafkaCluster(nodes=1, version=kafka_version, broker_properties=_FORGETFUL,
                      features={"transaction.version": 1}) as cluster:
        yield cluster


def _producer_ids(cluster: KafkaCluster, topic: str, partition: int = 0) -> list[int]:
    """The producers the partition's leader keeps state for (DescribeProducers)."""
    metadata = Cluster.connect(ClientConfig.from_properties(
        {"bootstrap.servers": cluster.bootstrap()}))
    try:
        metadata.refresh([topic])
        leader = metadata.leader_for(topic, partition)
        response = metadata.client.request(leader, DescribeProducersRequest(
            topics=[TopicRequest(name=topic, partition_indexes=[partition])]))
    finally:
        metadata.close()
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0, answer
    return [state.producer_id for state in answer.active_producers]


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"the broker did not {what} within {WAIT_S} s"
        time.sleep(0.5)


def _forgotten(cluster: KafkaCluster, transactional_ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        with Admin.from_properties({"bootstrap.servers": cluster.bootstrap()}) as admin:
            described = admin.describe_transactions(transactional_ids)
        return all(described[tid].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                   for tid in transactional_ids)
    return check


def test_an_idempotent_producer_goes_on_after_the_broker_drops_its_state(
        forgetful_kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory(cluster=forgetful_kafka)
    with Producer({"bootstrap.servers": forgetful_kafka.bootstrap(),
                   "enable.idempotence": "true"}) as producer:
        first = [producer.send(topic, f"a{i}".encode(), partition=0) for i in range(3)]
        producer.flush()
        offsets = [future.result(timeout=10).offset for future in first]
        assert len(_producer_ids(forgetful_kafka, topic)) == 1
        _wait_for(lambda: _producer_ids(forgetful_kafka, topic) == [],
                  "drop the producer's state")
        # The next batch carries sequence 3 for a producer the partition no longer knows.
        later = [producer.send(topic, f"b{i}".encode(), partition=0) for i in range(3)]
        producer.flush()
        offsets += [future.result(timeout=10).offset for future in later]
    assert offsets == list(range(6))
    assert [r.value for r in read_all(forgetful_kafka.bootstrap(), topic, expect=6)] == [
        b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]


@pytest.mark.parametrize("protocol", [2, 1], ids=["tv2", "tv1"])
def test_an_expired_transactional_id_fails_the_next_transaction_naming_the_fix(
        request: pytest.FixtureRequest, protocol: int, kafka_version: str,
        topic_factory: Callable[..., str]) -> None:
    kafka_3 = kafka_version.split(".")[0] == "3"
    if kafka_3 and protocol == 2:
        pytest.skip("transactions v2 (KIP-890 part 2) needs a Kafka 4.0+ broker")
    # Kafka 3.x has no transaction.version feature and speaks v1 only.
    forgetful_kafka: KafkaCluster = request.getfixturevalue(
        "forgetful_kafka_tv1" if protocol == 1 and not kafka_3 else "forgetful_kafka")
    topic = topic_factory(cluster=forgetful_kafka)
    transactional_id = f"expiring-{uuid.uuid4().hex[:8]}"
    properties = {"bootstrap.servers": forgetful_kafka.bootstrap(),
                  "transactional.id": transactional_id}
    with Producer(properties) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"before", partition=0)
        producer.commit_transaction()
        _wait_for(_forgotten(forgetful_kafka, [transactional_id]),
                  "forget the transactional id")
        producer.begin_transaction()
        lost = producer.send(topic, b"refused", partition=0)
        # v2: the Produce answer's error; v1: AddPartitionsToTxn's, which fails the record.
        with pytest.raises((BrokerError, TransactionFatalError)) as refused:
            lost.result(timeout=30)
        assert "INVALID_PRODUCER_ID_MAPPING" in str(refused.value)
        with pytest.raises(TransactionFatalError) as fatal:
            producer.commit_transaction()
        message = str(fatal.value)
        assert transactional_id in message
        assert "transactional.id.expiration.ms" in message
        assert "create a new one" in message
        with pytest.raises(TransactionFatalError):  # no abort can save it either
            producer.abort_transaction()
    # As the message says: a new producer registers the id again.
    with Producer(properties) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.commit_transaction()
    assert [r.value for r in read_committed(forgetful_kafka.bootstrap(), topic, 2)] == [
        b"before", b"after"]


def test_init_transactions_before_each_transaction_outlives_the_expiry(
        forgetful_kafka: KafkaCluster, topic_factory: Callable[..., str]) -> None:
    """The sink's pattern: each task calls init_transactions() on its pooled producer."""
    topic = topic_factory(cluster=forgetful_kafka)
    transactional_id = f"reinit-{uuid.uuid4().hex[:8]}"
    with Producer({"bootstrap.servers": forgetful_kafka.bootstrap(),
                   "transactional.id": transactional_id}) as producer:
        for value in (b"first", b"second"):
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, value, partition=0)
            producer.commit_transaction()
            if value == b"first":
                _wait_for(_forgotten(forgetful_kafka, [transactional_id]),
                          "forget the transactional id")
    assert [r.value for r in read_committed(forgetful_kafka.bootstrap(), topic, 2)] == [
        b"first", b"second"]


def test_a_streaming_query_idle_past_the_expiry_writes_exactly_once(
        spark: Any, forgetful_kafka: KafkaCluster,
        topic_factory: Callable[..., str]) -> None:
    spark.dataSource.register(PyKafkaDataSource)
    bootstrap = forgetful_kafka.bootstrap()
    source = topic_factory(cluster=forgetful_kafka, partitions=2)
    target = topic_factory(cluster=forgetful_kafka, partitions=2)
    prefix = f"idle-{uuid.uuid4().hex[:8]}"
    checkpoint = tempfile.mkdtemp(prefix="sink-idle-")

    def produce(first: int, count: int) -> None:
        with Producer({"bootstrap.servers": bootstrap}) as producer:
            for i in range(first, first + count):
                producer.send(source, f"v{i}".encode(), partition=i % 2)

    def run() -> Any:
        query = (spark.readStream.format("pykafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest").load()
                 .select("value", "partition").writeStream.format("pykafka")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", target)
                 .option("transactionalIdPrefix", prefix)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None
        return query

    produce(0, 200)
    run()
    assert len(read_committed(bootstrap, target, 200)) == 200
    _wait_for(_forgotten(forgetful_kafka, [f"{prefix}-0", f"{prefix}-1"]),
              "forget the sink's transactional ids")
    produce(200, 200)
    run()  # the same checkpoint: the next batch, by producers the coordinator forgot
    got = read_committed(bootstrap, target, 400)
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(400))
    assert all(r.partition == int(r.value[1:]) % 2 for r in got)

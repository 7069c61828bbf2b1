"""Transactions against a real broker, for both transaction protocols (KIP-890 v1 and v2).

Read back with confluent-kafka at isolation.level=read_committed: committed records are
visible, aborted ones are not. Covers fencing by a second producer with the same
transactional.id, consumer offsets in a transaction, and the prepare-here / finish-elsewhere
path the exactly-once sink uses: prepare in one OS process, commit or abort in another,
repeat the commit, and lose a transaction to its timeout.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator

import pytest

from integration.harness.cluster import KafkaCluster
from integration.producer_util import (
    complete_elsewhere,
    in_other_process,
    prepare_elsewhere,
    read_all,
    wait_until_stable,
)
from kafka_ds.client.producer import Producer, complete_transaction
from kafka_ds.protocol.errors import BrokerError, ErrorCode
from kafka_ds.protocol.txn_state import (
    ProducerFencedError,
    TransactionAbortableError,
    TransactionFatalError,
    TransactionLostError,
    TransactionStateError,
    TransactionToken,
)


def _is_kafka_3(version: str) -> bool:
    return version.split(".")[0] == "3"


@pytest.fixture(scope="module")
def kafka_tv1(kafka_version: str) -> Iterator[KafkaCluster]:
    """A broker whose finalized transaction.version is 1: clients must use protocol v1."""
    with KafkaCluster(nodes=1, version=kafka_version,
                      features={"transaction.version": 1}) as cluster:
        yield cluster


@pytest.fixture(params=[1, 2], ids=["tv1", "tv2"])
def txn_cluster(request: pytest.FixtureRequest, kafka_version: str) -> tuple[KafkaCluster, int]:
    if _is_kafka_3(kafka_version):
        # Kafka 3.x has no transaction.version feature: it only speaks protocol v1.
        if request.param == 2:
            pytest.skip("transactions v2 (KIP-890 part 2) needs a Kafka 4.0+ broker")
        return request.getfixturevalue("kafka"), 1
    if request.param == 1:
        return request.getfixturevalue("kafka_tv1"), 1
    return request.getfixturevalue("kafka"), 2


def _topic(cluster: KafkaCluster, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions)
    return name


def _producer(cluster: KafkaCluster, txn_id: str, **extra: str) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": txn_id,
                     **extra})


def _committed_values(cluster: KafkaCluster, topic: str) -> list[bytes | None]:
    return sorted(r.value for r in read_all(cluster.bootstrap(), topic, read_committed=True))


def test_committed_visible_aborted_invisible(txn_cluster: tuple[KafkaCluster, int]) -> None:
    cluster, protocol = txn_cluster
    topic = _topic(cluster)
    with _producer(cluster, f"t-{uuid.uuid4().hex}") as producer:
        producer.init_transactions()
        for round_ in range(3):
            producer.begin_transaction()
            assert producer.transaction_protocol == protocol
            futures = [producer.send(topic, f"r{round_}-{i}".encode(), key=str(i).encode())
                       for i in range(50)]
            if round_ == 1:
                producer.flush()  # the aborted records really are in the log
                assert all(f.result().offset >= 0 for f in futures)
                producer.abort_transaction()
            else:
                producer.commit_transaction()
        # A transaction with no records commits without an EndTxn (it would be refused).
        producer.begin_transaction()
        producer.commit_transaction()
    values = _committed_values(cluster, topic)
    expected = sorted(f"r{r}-{i}".encode() for r in (0, 2) for i in range(50))
    assert values == expected
    uncommitted = read_all(cluster.bootstrap(), topic)
    assert len(uncommitted) == 150  # the aborted 50 are there, invisible to read_committed


def test_second_producer_fences_the_first(txn_cluster: tuple[KafkaCluster, int]) -> None:
    cluster, _ = txn_cluster
    topic = _topic(cluster)
    txn_id = f"fence-{uuid.uuid4().hex}"
    first = _producer(cluster, txn_id)
    second = _producer(cluster, txn_id)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"zombie").result(30)
        second.init_transactions()  # fences the first and aborts its transaction
        second.begin_transaction()
        second.send(topic, b"winner")
        second.commit_transaction()
        with pytest.raises(ProducerFencedError, match=r"another producer with the same "
                                                      r"transactional\.id"):
            first.commit_transaction()
        with pytest.raises(TransactionFatalError):
            first.begin_transaction()
    finally:
        first.close(0)
        second.close()
    assert _committed_values(cluster, topic) == [b"winner"]


def test_offsets_commit_with_the_transaction(txn_cluster: tuple[KafkaCluster, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    cluster, _ = txn_cluster
    topic = _topic(cluster)
    group = f"g-{uuid.uuid4().hex}"
    with _producer(cluster, f"off-{uuid.uuid4().hex}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"with-offsets")
        producer.send_offsets_to_transaction({(topic, 0): 42, (topic, 1): (7, "meta")}, group)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(topic, 0): 99}, group)
        producer.abort_transaction()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                       timeout=20)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 42), (1, 7)]


def test_prepare_in_one_process_commit_in_another(txn_cluster: tuple[KafkaCluster, int]
                                                  ) -> None:
    cluster, protocol = txn_cluster
    topic = _topic(cluster)
    token = in_other_process(prepare_elsewhere, cluster.bootstrap(), topic,
                             f"prep-{uuid.uuid4().hex}", 40, 60_000, 2)
    assert isinstance(token, TransactionToken)
    assert token.protocol_version == protocol
    assert token.partitions == ((topic, 0), (topic, 1)) and token.record_count == 40
    assert pickle.loads(pickle.dumps(token)) == token
    assert _committed_values(cluster, topic) == []  # prepared, not visible yet
    assert in_other_process(complete_elsewhere, cluster.bootstrap(), token, True) == "committed"
    assert _committed_values(cluster, topic) == sorted(f"prepared-{i}".encode()
                                                       for i in range(40))
    # Repeating the commit with the same token succeeds and changes nothing.
    assert complete_transaction({"bootstrap.servers": cluster.bootstrap()}, token,
                                commit=True) == "committed"
    assert in_other_process(complete_elsewhere, cluster.bootstrap(), token, True) == "committed"
    assert len(_committed_values(cluster, topic)) == 40


def test_prepare_in_one_process_abort_in_another(txn_cluster: tuple[KafkaCluster, int]) -> None:
    cluster, _ = txn_cluster
    topic = _topic(cluster)
    txn_id = f"prep-abort-{uuid.uuid4().hex}"
    token = in_other_process(prepare_elsewhere, cluster.bootstrap(), topic, txn_id, 25)
    assert in_other_process(complete_elsewhere, cluster.bootstrap(), token, False) == "aborted"
    assert in_other_process(complete_elsewhere, cluster.bootstrap(), token, False) == "aborted"
    assert len(read_all(cluster.bootstrap(), topic)) == 25
    assert _committed_values(cluster, topic) == []
    # The id is usable again afterwards (the next task's InitProducerId).
    with _producer(cluster, txn_id) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"after")
        producer.commit_transaction()
    assert _committed_values(cluster, topic) == [b"after"]


def test_transaction_past_its_timeout_is_lost(txn_cluster: tuple[KafkaCluster, int]) -> None:
    cluster, _ = txn_cluster
    topic = _topic(cluster)
    token = prepare_elsewhere(cluster.bootstrap(), topic, f"slow-{uuid.uuid4().hex}", 10,
                              transaction_timeout_ms=2_000)
    wait_until_stable(cluster.bootstrap(), topic)  # the coordinator aborted it (timeout)
    with pytest.raises(TransactionLostError, match="transaction lost"):
        complete_transaction({"bootstrap.servers": cluster.bootstrap()}, token, commit=True)
    assert _committed_values(cluster, topic) == []


def test_transaction_timed_out_by_the_coordinator_is_abortable(
        txn_cluster: tuple[KafkaCluster, int]) -> None:
    """Issue 14 (KIP-588): once the coordinator has aborted a transaction that outlived
    transaction.timeout.ms (bumping the epoch), Produce answers INVALID_PRODUCER_EPOCH.
    That is abortable, not fatal: under transactions v2 the abort goes through (EndTxn v5
    accepts the retried end) and the next transaction works; a v1 coordinator answers the
    abort with PRODUCER_FENCED, and only then is the producer finished."""
    cluster, protocol = txn_cluster
    topic = _topic(cluster, 1)
    with _producer(cluster, f"expiring-{uuid.uuid4().hex}",
                   **{"transaction.timeout.ms": "1000"}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"first", partition=0).result(30)
        wait_until_stable(cluster.bootstrap(), topic)  # the coordinator aborted it
        late = producer.send(topic, b"late", partition=0).exception(30)
        assert isinstance(late, BrokerError) and late.code == ErrorCode.INVALID_PRODUCER_EPOCH
        with pytest.raises(TransactionAbortableError, match="abort_transaction"):
            producer.commit_transaction()
        if protocol == 2:
            producer.abort_transaction()
            producer.begin_transaction()
            producer.send(topic, b"after", partition=0).result(30)
            producer.commit_transaction()
        else:
            with pytest.raises(ProducerFencedError, match=r"transaction\.timeout\.ms"):
                producer.abort_transaction()
    assert _committed_values(cluster, topic) == ([b"after"] if protocol == 2 else [])


def test_fenced_prepared_transaction_is_lost(txn_cluster: tuple[KafkaCluster, int]) -> None:
    cluster, _ = txn_cluster
    topic = _topic(cluster)
    txn_id = f"zombie-{uuid.uuid4().hex}"
    token = prepare_elsewhere(cluster.bootstrap(), topic, txn_id, 10)
    with _producer(cluster, txn_id) as newer:
        newer.init_transactions()  # a retried task: fences and aborts the prepared one
    with pytest.raises(TransactionLostError, match="fenced"):
        complete_transaction({"bootstrap.servers": cluster.bootstrap()}, token, commit=True)


def test_empty_transaction_token_completes_as_a_no_op(kafka: KafkaCluster) -> None:
    with _producer(kafka, f"empty-{uuid.uuid4().hex}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        token = producer.prepare_transaction()
    assert token.is_empty and token.record_count == 0
    assert complete_transaction({"bootstrap.servers": kafka.bootstrap()}, token, True) == "empty"


def test_state_errors_say_what_to_do(kafka: KafkaCluster) -> None:
    topic = _topic(kafka)
    with _producer(kafka, f"state-{uuid.uuid4().hex}") as producer:
        with pytest.raises(TransactionStateError, match="init_transactions"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send(topic, b"outside a transaction")
        producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="already open"):
            producer.begin_transaction()
        producer.abort_transaction()

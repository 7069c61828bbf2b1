"""Our producer and fetcher over SASL SCRAM on TLS (the harness's SASL_SSL listener), the
combination a secured production cluster uses (examples/secured_quickstart.py).

The oracles are confluent-kafka (librdkafka), reading over the same SASL_SSL listener with its
own TLS and SCRAM code: what our producer wrote there, it must read back record for record,
and our fetcher must give the same rows; kafka-python writing there; and Spark's JVM connector
reading with the same Java option map as format("pykafka"). A refused password and a missing
truststore on that listener show that both layers are really on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from integration.fetch_helpers import arrow_rows, by_partition, confluent_rows, produce_values
from integration.harness.cluster import KafkaCluster
from integration.props import kafka_ds_properties
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.errors import AuthenticationError

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def _records(count: int) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes]]]]:
    """(partition, key, value, headers): keys, a keyless record and headers, on 2 partitions."""
    return [(i % 2, None if i % 7 == 0 else b"k%d" % i, b"value-%d-" % i * (1 + i % 5),
             [("n", b"%d" % i)] if i % 3 else []) for i in range(60)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_producer_and_fetcher_over_sasl_ssl_agree_with_confluent_kafka(
        kafka: KafkaCluster, topic_factory: Callable[..., str], mechanism: str) -> None:
    topic = topic_factory(partitions=2)
    props = kafka_ds_properties(kafka, "SASL_SSL", mechanism=mechanism)
    assert props["security.protocol"] == "SASL_SSL"
    assert props["bootstrap.servers"] == kafka.bootstrap("SASL_SSL")
    sent = _records(60)
    with Producer({**props, "linger.ms": "5"}) as producer:
        futures = [producer.send(topic, value, key=key, headers=headers, partition=partition)
                   for partition, key, value, headers in sent]
        producer.flush(60_000)
        assert all(future.result(60) is not None for future in futures)

    # The independent client, over the same listener with its own TLS and SCRAM.
    theirs = {p: confluent_rows(kafka, topic, p, 0, 30,
                                **kafka.librdkafka_config("SASL_SSL", mechanism=mechanism))
              for p in (0, 1)}
    for partition in (0, 1):
        expected = [(key, value, headers or None) for p, key, value, headers in sent
                    if p == partition]
        assert [(row["key"], row["value"],
                 None if row["headers"] is None else [(h["key"], h["value"])
                                                      for h in row["headers"]])
                for row in theirs[partition]] == expected

    with Fetcher.from_properties({**props, "include.headers": "true"}) as fetcher:
        ours = by_partition(arrow_rows(list(fetcher.read_arrow(
            [(topic, 0, 0, 30), (topic, 1, 0, 30)]))))
    assert ours == theirs


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_transactions_over_sasl_ssl_are_read_committed_by_confluent_kafka(
        kafka: KafkaCluster, topic: str, mechanism: str) -> None:
    """The sink's path: the transaction coordinator found and spoken to over SASL_SSL."""
    props = kafka_ds_properties(kafka, "SASL_SSL", mechanism=mechanism)
    with Producer({**props, "transactional.id": f"sasl-ssl-{topic}"}) as producer:
        producer.init_transactions(60_000)
        producer.begin_transaction()
        # Acknowledged before the abort, so the aborted records are in the log.
        assert producer.send_many(topic, [b"aborted-%d" % i for i in range(5)],
                                  partition=0).result(60) == 5
        producer.abort_transaction(60_000)
        producer.begin_transaction()
        producer.send_many(topic, [b"committed-%d" % i for i in range(5)], partition=0)
        producer.commit_transaction(60_000)
    # 5 aborted + abort marker + 5 committed + commit marker = offsets 0..11.
    rows = confluent_rows(kafka, topic, 0, 0, 12, isolation="read_committed",
                          **kafka.librdkafka_config("SASL_SSL", mechanism=mechanism))
    assert [row["value"] for row in rows] == [b"committed-%d" % i for i in range(5)]


def test_sasl_ssl_checks_both_the_password_and_the_certificate(kafka: KafkaCluster,
                                                               topic: str) -> None:
    """The listener is TLS (no truststore: the certificate is refused) and SCRAM (a wrong
    password is refused once TLS is up)."""
    wrong_password = kafka_ds_properties(kafka, "SASL_SSL", mechanism="SCRAM-SHA-512",
                                         password="not-the-password")
    with Cluster.connect(ClientConfig.from_properties(wrong_password)) as cluster, \
            pytest.raises(AuthenticationError, match="SCRAM-SHA-512") as refused:
        cluster.topic(topic, timeout_ms=30_000)
    assert "not-the-password" not in str(refused.value)

    untrusted = kafka_ds_properties(kafka, "SASL_SSL", mechanism="SCRAM-SHA-512")
    del untrusted["ssl.truststore.location"]  # the system CAs do not know the harness CA
    with Cluster.connect(ClientConfig.from_properties(untrusted)) as cluster, \
            pytest.raises(AuthenticationError, match="truststore"):
        cluster.topic(topic, timeout_ms=30_000)


def test_kafka_python_writes_over_sasl_ssl_and_our_fetcher_reads_it(
        kafka: KafkaCluster, topic: str) -> None:
    """The other direction, with the harness's kafka-python settings for the listener."""
    from kafka import KafkaProducer

    sent = [(b"k%d" % i, b"from-kafka-python-%d" % i) for i in range(20)]
    producer = KafkaProducer(**kafka.kafka_python_config("SASL_SSL", mechanism="SCRAM-SHA-512"),
                             acks="all")
    try:
        for key, value in sent:
            producer.send(topic, key=key, value=value, partition=0)
        producer.flush(60)
    finally:
        producer.close()
    props = kafka_ds_properties(kafka, "SASL_SSL", mechanism="SCRAM-SHA-512")
    with Fetcher.from_properties(props) as fetcher:
        rows = arrow_rows(list(fetcher.read_arrow([(topic, 0, 0, len(sent))])))
    assert [(row["key"], row["value"]) for row in rows] == sent


@pytest.mark.spark
def test_one_java_option_map_reads_over_sasl_ssl_through_both_connectors(
        spark: Any, kafka: KafkaCluster, topic: str) -> None:
    """The harness's Java settings for SASL_SSL (SCRAM-SHA-512 in sasl.jaas.config, the CA as
    a PEM truststore), unchanged, for Spark's JVM connector and for ours."""
    from integration.spark_source_util import assert_same, read_batch

    produce_values(kafka, topic, 40)
    options = {"subscribe": topic, **{f"kafka.{key}": value for key, value in
                                      kafka.java_config("SASL_SSL",
                                                        mechanism="SCRAM-SHA-512").items()}}
    assert options["kafka.security.protocol"] == "SASL_SSL"
    ours = read_batch(spark, "pykafka", options)
    jvm = read_batch(spark, "kafka", options)
    assert ours.count() == 40
    assert_same(ours, jvm)

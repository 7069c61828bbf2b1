"""Java-style TLS stores against the real broker's mutual-TLS listener (issue 13, point 1).

The stores are the harness's, written by the JDK's keytool (JKS with its own key password,
PKCS12) at cluster start, plus PEM files and PEM text. The MTLS listener refuses a client
without a certificate signed by the harness CA, so a record written and read back proves both
sides of the material were used. The independent oracle is librdkafka reading over PLAINTEXT.
"""

from __future__ import annotations

from typing import Any

import pytest

from integration.fetch_helpers import produce_values
from integration.harness.cluster import KafkaCluster
from integration.producer_util import read_all
from integration.props import STORE_KINDS, java_tls_stores
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.errors import ConfigError


def _roundtrip(kafka: KafkaCluster, topic: str, properties: dict[str, str], tag: str) -> None:
    values = [f"{tag}-{i}".encode() for i in range(20)]
    producer = Producer({**properties, "linger.ms": "0"})
    try:
        assert producer.send_many(topic, values, partition=0).result(60) == len(values)
    finally:
        producer.close()
    with Fetcher.from_properties(properties) as fetcher:
        read = [record.value for _, record in fetcher.read_records([(topic, 0, 0, len(values))])]
    assert read == values
    assert [r.value for r in read_all(kafka.bootstrap(), topic)] == values


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_keytool_and_pem_stores_authenticate_to_the_mtls_listener(kafka: KafkaCluster,
                                                                  topic: str, kind: str) -> None:
    assert kafka.tls is not None
    properties = {"bootstrap.servers": kafka.bootstrap("MTLS"), "security.protocol": "SSL",
                  **java_tls_stores(kafka.tls, kind)}
    _roundtrip(kafka, topic, properties, kind)


def test_the_java_clients_own_config_works_unchanged(kafka: KafkaCluster, topic: str) -> None:
    """The properties the JVM clients of the harness use (Spark's connector among them), as
    they are: a PEM truststore and a PKCS12 keystore with its store and key passwords."""
    java = kafka.java_config("MTLS")
    assert java["ssl.keystore.type"] == "PKCS12" and java["ssl.truststore.type"] == "PEM"
    _roundtrip(kafka, topic, java, "java")


def test_a_wrong_keystore_password_fails_before_any_connection(kafka: KafkaCluster) -> None:
    assert kafka.tls is not None
    properties = {"bootstrap.servers": kafka.bootstrap("MTLS"), "security.protocol": "SSL",
                  **java_tls_stores(kafka.tls, "keytool-jks"),
                  "ssl.key.password": "wrong-key-password"}
    with pytest.raises(ConfigError, match=r"ssl\.key\.password is wrong") as raised:
        ClientConfig.from_properties(properties)
    assert "wrong-key-password" not in str(raised.value)


def test_one_java_option_map_reads_through_both_connectors(spark: Any, kafka: KafkaCluster,
                                                          topic: str) -> None:
    """The README's example: the same ``kafka.*`` map, keytool JKS stores and a key with its
    own password over mutual TLS, for Spark's JVM connector and for ours, unchanged."""
    from integration.spark_source_util import assert_same, read_batch

    assert kafka.tls is not None
    produce_values(kafka, topic, 50)
    options = {"kafka.bootstrap.servers": kafka.bootstrap("MTLS"),
               "kafka.security.protocol": "SSL", "subscribe": topic,
               **{f"kafka.{key}": value
                  for key, value in java_tls_stores(kafka.tls, "keytool-jks").items()}}
    ours = read_batch(spark, "pykafka", options)
    jvm = read_batch(spark, "kafka", options)
    assert ours.count() == 50
    assert_same(ours, jvm)

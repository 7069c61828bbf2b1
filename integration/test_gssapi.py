"""SASL GSSAPI (Kerberos) against the broker's SASL_GSSAPI listener and the harness's own MIT
KDC (issue 13, point 2).

The client's settings are the Java client's, unchanged: ``sasl.kerberos.service.name`` and a
``Krb5LoginModule`` JAAS entry with ``useKeyTab``/``keyTab``/``principal``. The oracles stand
outside kafka_ds: the KDC's log (it issued a service ticket for the broker to our principal),
the broker (the listener speaks nothing but GSSAPI) and librdkafka reading the records back.
"""

from __future__ import annotations

import time

import pytest

from integration.harness import kdc as kerberos
from integration.harness.cluster import KafkaCluster
from integration.producer_util import read_all
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.producer import Producer
from kafka_ds.protocol.errors import AuthenticationError


@pytest.fixture
def java_kerberos(kerberized_kafka: KafkaCluster, monkeypatch: pytest.MonkeyPatch
                  ) -> dict[str, str]:
    """The Java client's properties for the GSSAPI listener; KRB5_CONFIG as a JVM's
    -Djava.security.krb5.conf would point to the realm's krb5.conf."""
    assert kerberized_kafka.kdc is not None
    monkeypatch.setenv("KRB5_CONFIG", str(kerberized_kafka.kdc.krb5_conf))
    return kerberized_kafka.java_config("SASL_GSSAPI")


def _tickets_issued(cluster: KafkaCluster) -> list[str]:
    assert cluster.kdc is not None
    log = (cluster.kdc.directory / "kdc.log").read_text(errors="replace")
    return [line for line in log.splitlines()
            if "TGS_REQ" in line and "ISSUE" in line
            and f"{kerberos.CLIENT_PRINCIPAL} for {kerberos.BROKER_PRINCIPAL}" in line]


def test_a_java_kerberos_config_writes_and_reads_unchanged(
        kerberized_kafka: KafkaCluster, topic: str, java_kerberos: dict[str, str]) -> None:
    assert java_kerberos["sasl.mechanism"] == "GSSAPI"
    assert "Krb5LoginModule required useKeyTab=true" in java_kerberos["sasl.jaas.config"]
    issued_before = len(_tickets_issued(kerberized_kafka))
    values = [f"kerberos-{i}".encode() for i in range(25)]
    producer = Producer({**java_kerberos, "linger.ms": "0"})
    try:
        assert producer.send_many(topic, values, partition=0).result(60) == len(values)
    finally:
        producer.close()
    with Fetcher.from_properties(java_kerberos) as fetcher:
        read = [record.value for _, record in fetcher.read_records([(topic, 0, 0, len(values))])]
        authentications = fetcher.cluster.client.metrics.authentications
    assert read == values
    assert authentications >= 1
    assert [r.value for r in read_all(kerberized_kafka.bootstrap(), topic)] == values
    # The KDC gave our principal a ticket for the broker's service principal.
    assert len(_tickets_issued(kerberized_kafka)) > issued_before


def _refused(properties: dict[str, str], topic: str) -> AuthenticationError:
    timeout_ms = 30_000
    started = time.monotonic()
    with Cluster.connect(ClientConfig.from_properties(
            {**properties, "socket.connection.setup.timeout.ms": str(timeout_ms)})) as cluster, \
            pytest.raises(AuthenticationError) as raised:
        cluster.topic(topic, timeout_ms=timeout_ms)
    # Refused at once, not retried until the timeout (half of it is slack for a loaded VM).
    assert time.monotonic() - started < timeout_ms / 1000 / 2
    return raised.value


def test_a_keytab_with_stale_keys_is_refused_at_once(
        kerberized_kafka: KafkaCluster, topic: str, java_kerberos: dict[str, str]) -> None:
    assert kerberized_kafka.kdc is not None
    stale = {**java_kerberos, "sasl.jaas.config": kerberos.jaas(
        kerberos.STALE_PRINCIPAL, kerberized_kafka.kdc.stale_keytab)}
    error = _refused(stale, topic)
    assert kerberos.STALE_PRINCIPAL in str(error) and "sasl.jaas.config" in str(error)


def test_a_wrong_service_name_is_refused_naming_the_option(
        kerberized_kafka: KafkaCluster, topic: str, java_kerberos: dict[str, str]) -> None:
    error = _refused({**java_kerberos, "sasl.kerberos.service.name": "not-kafka"}, topic)
    assert "sasl.kerberos.service.name=not-kafka" in str(error)
    assert "not-kafka@127.0.0.1" in str(error)


def test_another_principal_with_its_own_keytab_is_accepted(
        kerberized_kafka: KafkaCluster, topic: str, java_kerberos: dict[str, str]) -> None:
    """Credentials are per principal and keytab: a second login in the same process is its
    own, not the first one's reused."""
    assert kerberized_kafka.kdc is not None
    other = {**java_kerberos, "sasl.jaas.config": kerberos.jaas(
        kerberos.OTHER_PRINCIPAL, kerberized_kafka.kdc.other_keytab)}
    log = kerberized_kafka.kdc.directory / "kdc.log"
    before = log.read_text(errors="replace").count(
        f"{kerberos.OTHER_PRINCIPAL} for {kerberos.BROKER_PRINCIPAL}")
    with Cluster.connect(ClientConfig.from_properties(other)) as cluster:
        assert cluster.topic(topic).partition_count == 1
    assert log.read_text(errors="replace").count(
        f"{kerberos.OTHER_PRINCIPAL} for {kerberos.BROKER_PRINCIPAL}") > before

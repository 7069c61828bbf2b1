"""Smoke tests proving the harness runs a real, correctly configured Kafka.

They use independent clients only (confluent-kafka / librdkafka, kafka-python, Python's
ssl, Spark's JVM connector), never kafka_ds: every listener carries data both ways, bad
credentials and wrong trust fail fast with the right error, hostname verification is on,
feature levels can be switched, and a 3-node cluster survives losing its partition leader.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from integration.harness.cluster import KafkaCluster
from integration.harness.jars import COMPAT_KAFKA_VERSION

Record = tuple[bytes, bytes, list[tuple[str, bytes]]]
AUTH_FAILURE_BUDGET_S = 10.0  # a rejected login must surface well within this


def _records(n: int, tag: str = "") -> list[Record]:
    return [(f"key-{tag}{i}".encode(), f"value-{tag}{i}".encode() * 3,
             [("h1", f"header-{i}".encode()), ("h2", b"\x00\xffbinary")]) for i in range(n)]


def _produce(conf: dict[str, Any], topic: str, records: list[Record], **extra: Any) -> None:
    errors: list[Any] = []
    producer = Producer({**conf, "acks": "all", **extra})
    for key, value, headers in records:
        producer.produce(topic, value=value, key=key, headers=headers, partition=0,
                         on_delivery=lambda err, msg: errors.append(err) if err else None)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered within 30s"
    assert errors == []


def _consume(conf: dict[str, Any], topic: str, count: int, timeout_s: float = 30.0
             ) -> list[Any]:
    consumer = Consumer({**conf, "group.id": f"smoke-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


def _assert_roundtrip(sent: list[Record], got: list[Any]) -> None:
    assert [m.offset() for m in got] == list(range(len(sent)))
    assert [(m.key(), m.value(), m.headers()) for m in got] == sent


LISTENER_CASES = [("PLAINTEXT", None), ("SASL_PLAIN", None), ("SASL_SCRAM", "SCRAM-SHA-256"),
                  ("SASL_SCRAM", "SCRAM-SHA-512"), ("SASL_OAUTH", None), ("SSL", None),
                  ("MTLS", None), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "SCRAM-SHA-512")]


@pytest.mark.parametrize(("listener", "mechanism"), LISTENER_CASES,
                         ids=[f"{lst}-{m}" if lst == "SASL_SSL" else m or lst
                              for lst, m in LISTENER_CASES])
def test_roundtrip_over_each_listener(kafka: KafkaCluster, topic: str, listener: str,
                                      mechanism: str | None) -> None:
    kwargs = {"mechanism": mechanism} if mechanism else {}
    conf = kafka.librdkafka_config(listener, **kwargs)
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        assert conf["ssl.endpoint.identification.algorithm"] == "https"
    sent = _records(5, listener)
    _produce(conf, topic, sent)
    _assert_roundtrip(sent, _consume(conf, topic, len(sent)))


def test_static_unsigned_oauth_token_with_kafka_python(kafka: KafkaCluster, topic: str) -> None:
    # The path kafka_ds takes: a client sends client_config()["oauth_token"] as is.
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition

    cfg = kafka.client_config("SASL_OAUTH")
    assert cfg["oauth_token"].endswith(".")  # alg=none: empty signature
    kp = kafka.kafka_python_config("SASL_OAUTH")
    producer = KafkaProducer(**kp, acks="all")
    producer.send(topic, key=b"k", value=b"v", headers=[("h", b"1")], partition=0).get(30)
    producer.close()
    consumer = KafkaConsumer(**kp, auto_offset_reset="earliest")
    consumer.assign([KpTopicPartition(topic, 0)])
    msgs: list[Any] = []
    deadline = time.monotonic() + 30
    while not msgs and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            msgs.extend(batch)
    consumer.close()
    assert [(m.key, m.value, m.headers) for m in msgs] == [(b"k", b"v", [("h", b"1")])]


def _first_error(conf: dict[str, Any], budget_s: float) -> tuple[Any, float]:
    """Start a client and return (its first error, seconds until it was reported)."""
    errors: list[Any] = []
    t0 = time.monotonic()
    producer = Producer({**conf, "error_cb": errors.append})
    while not errors and time.monotonic() - t0 < budget_s:
        producer.poll(0.1)
    elapsed = time.monotonic() - t0
    assert errors, f"no error reported within {budget_s}s"
    return errors[0], elapsed


@pytest.mark.parametrize(("listener", "mechanism", "expected_text"), [
    ("SASL_PLAIN", None, "Invalid username or password"),
    ("SASL_SCRAM", "SCRAM-SHA-256", "invalid credentials with SASL mechanism SCRAM-SHA-256"),
    ("SASL_SCRAM", "SCRAM-SHA-512", "invalid credentials with SASL mechanism SCRAM-SHA-512"),
])
def test_wrong_password_fails_fast(kafka: KafkaCluster, listener: str, mechanism: str | None,
                                   expected_text: str) -> None:
    kwargs = {"mechanism": mechanism} if mechanism else {}
    conf = kafka.librdkafka_config(listener, password="wrong-password", **kwargs)
    error, elapsed_s = _first_error(conf, AUTH_FAILURE_BUDGET_S)
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert expected_text in error.str(), error.str()
    assert elapsed_s < 5.0


def test_untrusted_ca_fails_tls(kafka: KafkaCluster) -> None:
    """librdkafka must refuse the broker's certificate. It usually reports that first, as an
    _SSL error; now and then a connection-level _TRANSPORT error (the broker closing its side
    of the failed handshake) comes first. So: collect errors until the verification failure
    shows up, allowing only transport noise before it. A trusted CA would report no error at
    all, and a different failure would never say "certificate verify failed": both fail."""
    assert kafka.tls is not None
    conf = {**kafka.librdkafka_config("SSL"), "ssl.ca.location": str(kafka.tls.untrusted_ca_pem)}
    errors, elapsed_s = _errors_until(
        conf, AUTH_FAILURE_BUDGET_S, lambda e: "certificate verify failed" in e.str())
    refusal = errors[-1]
    assert "certificate verify failed" in refusal.str(), [e.str() for e in errors]
    assert refusal.code() in (KafkaError._SSL, KafkaError._TRANSPORT), refusal
    noise = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    assert all(e.code() in noise for e in errors[:-1]), [e.str() for e in errors]
    assert elapsed_s < 5.0


def _errors_until(conf: dict[str, Any], budget_s: float, wanted: Callable[[Any], bool]
                  ) -> tuple[list[Any], float]:
    """Errors a client reports until one satisfies ``wanted`` (the last), or ``budget_s``."""
    errors: list[Any] = []
    t0 = time.monotonic()
    producer = Producer({**conf, "error_cb": errors.append})
    while not any(wanted(e) for e in errors) and time.monotonic() - t0 < budget_s:
        producer.poll(0.1)
    elapsed = time.monotonic() - t0
    matching = [i for i, e in enumerate(errors) if wanted(e)]
    assert matching, f"no such error within {budget_s}s: {[e.str() for e in errors]}"
    return errors[:matching[0] + 1], elapsed


def _tls_connect(kafka: KafkaCluster, listener: str, server_hostname: str,
                 client_cert: bool) -> bytes:
    """TLS-connect with Python's ssl (hostname checking on), send ApiVersions v0, read reply."""
    assert kafka.tls is not None
    ctx = ssl.create_default_context(cafile=str(kafka.tls.ca_pem))
    if client_cert:
        ctx.load_cert_chain(str(kafka.tls.client_cert_pem), str(kafka.tls.client_key_pem))
    raw = socket.create_connection(("127.0.0.1", kafka.port(1, listener)), timeout=10)
    with ctx.wrap_socket(raw, server_hostname=server_hostname) as sock:
        request = struct.pack(">hhih", 18, 0, 7, -1)  # ApiVersions v0, null client id
        sock.sendall(struct.pack(">i", len(request)) + request)
        return sock.recv(8)


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_broker_certificate_matches_loopback_names(kafka: KafkaCluster, hostname: str) -> None:
    reply = _tls_connect(kafka, "SSL", hostname, client_cert=False)
    assert struct.unpack(">ii", reply)[1] == 7  # size, then our correlation id


def test_hostname_mismatch_is_rejected(kafka: KafkaCluster) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|doesn't match"):
        _tls_connect(kafka, "SSL", "not-the-broker.example", client_cert=False)


def test_mtls_requires_client_certificate(kafka: KafkaCluster) -> None:
    assert struct.unpack(">ii", _tls_connect(kafka, "MTLS", "localhost", True))[1] == 7
    # TLS 1.3 reports the missing certificate after the handshake, on the first read.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        reply = _tls_connect(kafka, "MTLS", "localhost", client_cert=False)
        if not reply:
            raise ConnectionError("closed by broker")


def test_transaction_version_can_be_switched(kafka: KafkaCluster) -> None:
    default = kafka.describe_features().get("transaction.version")
    if kafka.version.startswith("3."):
        assert default is None  # 3.9 does not finalize transaction.version by default
        return
    assert default == 2  # Kafka 4.x finalizes KIP-890 transactions (TV2) by default
    try:
        kafka.set_feature("transaction.version", 1)
        assert kafka.describe_features()["transaction.version"] == 1
    finally:
        kafka.set_feature("transaction.version", 2)
    assert kafka.describe_features()["transaction.version"] == 2


def test_perf_tool_runs_from_cached_jars(kafka: KafkaCluster, topic: str) -> None:
    out = kafka.run_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                         "--num-records", "2000", "--record-size", "100", "--throughput", "-1",
                         "--producer-props", f"bootstrap.servers={kafka.bootstrap()}").stdout
    assert "2000 records sent" in out
    assert kafka.partitions(topic)[0].leader == 1


def test_spark_jvm_connector_reads_the_topic(kafka: KafkaCluster, topic: str, spark: Any
                                             ) -> None:
    sent = _records(20)
    _produce(kafka.librdkafka_config(), topic, sent)
    options = {f"kafka.{k}": v for k, v in kafka.java_config("SASL_SCRAM").items()}
    rows = (spark.read.format("kafka").options(**options).option("subscribe", topic)
            .option("includeHeaders", "true").load()
            .select("key", "value", "headers", "offset").orderBy("offset").collect())
    assert [(bytes(r.key), bytes(r.value)) for r in rows] == [(k, v) for k, v, _ in sent]
    assert [[(h.key, bytes(h.value)) for h in r.headers] for r in rows] == [h for *_, h in sent]


def _wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.mark.cluster
def test_leader_kill_keeps_data_and_node_rejoins(kafka_cluster3: KafkaCluster,
                                                 topic_factory: Callable[..., str]) -> None:
    cluster = kafka_cluster3
    topic = topic_factory(replication_factor=3, config={"min.insync.replicas": 2},
                          cluster=cluster)
    conf = cluster.librdkafka_config()
    first = _records(200, "a")
    _produce(conf, topic, first, **{"enable.idempotence": True})
    (before,) = cluster.partitions(topic)
    assert sorted(before.isr) == [1, 2, 3]

    victim = before.leader
    survivor = next(n for n in cluster.node_ids if n != victim)
    cluster.kill(victim)

    def new_leader() -> Any:
        (p,) = cluster.partitions(topic, node_id=survivor)
        return p if p.leader not in (-1, victim) and victim not in p.isr else None

    after = _wait_for(new_leader, 60, f"a new leader replacing node {victim}")
    assert after.leader != victim and len(after.isr) == 2

    second = _records(50, "b")  # acks=all still succeeds: ISR 2 >= min.insync.replicas 2
    _produce(conf, topic, second, **{"enable.idempotence": True})
    _assert_roundtrip(first + second, _consume(conf, topic, len(first) + len(second)))

    cluster.restart_node(victim)

    def rejoined() -> bool:
        (p,) = cluster.partitions(topic, node_id=survivor)
        return victim in p.isr

    _wait_for(rejoined, 90, f"node {victim} back in the ISR")
    assert cluster.partitions(topic, node_id=victim)[0].isr  # it serves metadata again


@pytest.mark.skipif(not os.environ.get("KAFKA_DS_TEST_COMPAT"),
                    reason="set KAFKA_DS_TEST_COMPAT=1 to start a Kafka 3.9 broker as well")
def test_kafka_39_starts_and_serves_scram() -> None:
    with KafkaCluster(version=COMPAT_KAFKA_VERSION) as old:
        assert old.version.startswith("3.9.")
        old.create_topic("compat", 1)
        conf = old.librdkafka_config("SASL_SCRAM", mechanism="SCRAM-SHA-512")
        sent = _records(3)
        _produce(conf, "compat", sent)
        _assert_roundtrip(sent, _consume(conf, "compat", len(sent)))

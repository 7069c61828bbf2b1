"""TLS hostname verification for whole Spark queries: on unless explicitly turned off.

The harness broker's certificate names ``localhost`` and ``127.0.0.1`` only. Each query here
reaches the SSL listener by another name (``unlisted_name``): this machine's hostname when it
resolves, else the loopback address ``127.0.0.2`` (through a forwarder when the name's
address is not the listener's; ``KAFKA_DS_TEST_UNLISTED_HOST`` names another host to try).
A batch read, a streaming pykafka -> pykafka exactly-once pipeline, and that pipeline's sink
alone must each fail at query start with our error naming the host we dialled and the option
that turns the check off, writing nothing; with
``kafka.ssl.endpoint.identification.algorithm=""`` the same queries work, and their rows
equal what the JVM connector reads.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality

from integration.harness.cluster import KafkaCluster
from integration.producer_util import read_all
from integration.props import kafka_ds_properties
from integration.spark_source_util import unique_name
from integration.test_connections import _Forwarder
from kafka_ds.client.producer import Producer

pytestmark = [pytest.mark.spark]

ROWS = 400
FIX = "ssl.endpoint.identification.algorithm"
QUERY_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def unlisted_name(kafka: KafkaCluster) -> Iterator[str]:
    """``host:port`` of the SSL listener by a name its certificate does not list."""
    port = kafka.port(1, "SSL")
    host = os.environ.get("KAFKA_DS_TEST_UNLISTED_HOST") or socket.gethostname()
    try:
        address = socket.gethostbyname(host)
    except OSError:
        host = address = "127.0.0.2"  # Linux routes all of 127/8 to the loopback
    if host in ("localhost", "127.0.0.1"):
        host = address = "127.0.0.2"
    if address != "127.0.0.1":  # the listener is bound to 127.0.0.1: forward from address
        port = _Forwarder(address, ("127.0.0.1", port)).port
    print(f"dialling the SSL listener as {host}:{port}")
    yield f"{host}:{port}"


def _ssl(kafka: KafkaCluster, bootstrap: str, *, check_hostname: bool) -> dict[str, str]:
    props = {**kafka_ds_properties(kafka, "SSL"), "bootstrap.servers": bootstrap}
    if not check_hostname:
        props[FIX] = ""
    return {f"kafka.{key}": value for key, value in props.items()}


@pytest.fixture(scope="module")
def input_topic(kafka: KafkaCluster) -> str:
    topic = unique_name("tls-in")
    kafka.create_topic(topic, 2, 1)
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        for i in range(ROWS):
            producer.send(topic, f"row-{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
        producer.flush()
    return topic


def _pipeline(spark: Any, source: dict[str, str], sink: dict[str, str], input_topic: str,
              output_topic: str, checkpoint: Path) -> Any:
    """pykafka -> upper(value) -> pykafka (exactly-once, the default), Trigger.AvailableNow."""
    stream = (spark.readStream.format("pykafka").options(**source)
              .option("subscribe", input_topic).option("startingOffsets", "earliest").load())
    return (stream.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
            .writeStream.format("pykafka").options(**sink).option("topic", output_topic)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def _fails(query: Any) -> tuple[str, float]:
    """Wait for ``query`` to fail: (its error text, seconds it took)."""
    started = time.monotonic()
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
    except Exception:  # the failure itself: query.exception() holds it
        finished = True
    finally:
        query.stop()
    assert finished, f"the query neither failed nor ended in {QUERY_TIMEOUT_S} s"
    error = query.exception()
    assert error is not None, "the query succeeded by a name the certificate does not list"
    assert not [p for p in query.recentProgress if p["numInputRows"]], \
        "a micro-batch ran before the failure: it should come at query start"
    return str(error), time.monotonic() - started


def _assert_names_host_and_fix(text: str, host_port: str) -> None:
    assert f"TLS certificate of {host_port} rejected" in text, text[-3000:]
    assert FIX in text, text[-3000:]


def _output_is_empty(kafka: KafkaCluster, topic: str) -> None:
    """Not a record, not even an uncommitted one (read_uncommitted)."""
    assert read_all(kafka.bootstrap(), topic, timeout_s=5) == []


@pytest.mark.timeout(900)
def test_queries_dialling_a_name_the_certificate_lacks_fail_at_start_naming_host_and_fix(
        spark: Any, kafka: KafkaCluster, unlisted_name: str, input_topic: str,
        tmp_path: Path) -> None:
    checked = _ssl(kafka, unlisted_name, check_hostname=True)
    started = time.monotonic()
    with pytest.raises(Exception) as read:
        (spark.read.format("pykafka").options(**checked).option("subscribe", input_topic)
         .load().collect())
    print(f"batch read failed in {time.monotonic() - started:.1f} s")
    _assert_names_host_and_fix(str(read.value), unlisted_name)

    output = unique_name("tls-out")
    kafka.create_topic(output, 2, 1)
    text, took_s = _fails(_pipeline(spark, checked, checked, input_topic, output,
                                    tmp_path / "both"))
    print(f"pipeline (source and sink by that name) failed in {took_s:.1f} s")
    _assert_names_host_and_fix(text, unlisted_name)
    # The sink alone: the source reads by a listed name (plaintext), the sink by the other.
    plain = {"kafka.bootstrap.servers": kafka.bootstrap()}
    text, took_s = _fails(_pipeline(spark, plain, checked, input_topic, output,
                                    tmp_path / "sink"))
    print(f"pipeline (sink by that name) failed in {took_s:.1f} s")
    _assert_names_host_and_fix(text, unlisted_name)
    _output_is_empty(kafka, output)


@pytest.mark.timeout(900)
def test_the_same_queries_work_with_hostname_checks_explicitly_off(
        spark: Any, kafka: KafkaCluster, unlisted_name: str, input_topic: str,
        tmp_path: Path) -> None:
    unchecked = _ssl(kafka, unlisted_name, check_hostname=False)
    ours = (spark.read.format("pykafka").options(**unchecked).option("subscribe", input_topic)
            .load())
    jvm = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap())
           .option("subscribe", input_topic).load())
    order = ["topic", "partition", "offset"]
    assert_df_equality(ours.orderBy(*order), jvm.orderBy(*order))

    output = unique_name("tls-out")
    kafka.create_topic(output, 2, 1)
    started = time.monotonic()
    query = _pipeline(spark, unchecked, unchecked, input_topic, output, tmp_path / "ok")
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the pipeline did not finish"
    assert query.exception() is None, str(query.exception())[-3000:]
    print(f"pipeline with hostname checks off: {ROWS} rows in "
          f"{time.monotonic() - started:.1f} s")
    written = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap())
               .option("kafka.isolation.level", "read_committed").option("subscribe", output)
               .load().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))
    expected = jvm.selectExpr("CAST(key AS STRING) AS key",
                              "upper(CAST(value AS STRING)) AS value")
    assert_df_equality(written.orderBy("key"), expected.orderBy("key"),
                       ignore_nullable=True)

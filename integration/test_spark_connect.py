"""format("pykafka") from a Spark Connect client: batch reads, exactly-once streaming writes
and batch writes, through a Connect server started by pyspark's own ``start-connect-server.sh``.

The server runs in its own JVM with this venv's Python for its Python workers, so Spark finds
``pyspark_pykafka`` there and ``format("pykafka")`` resolves on the server without any call
from the client (the README's "Spark Connect" section describes the same setup). The client
is a ``pyspark.sql.connect`` session: no JVM in this process. Oracles: confluent-kafka reads
what is in the topics; the exactly-once path is proven by the sink's intent topic, which only
the transactional commit protocol writes.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness import nodeconf, procs
from integration.harness.cluster import KafkaCluster
from integration.harness.spark import SPARK_CONF_DIR
from integration.harness.standalone import spark_home
from integration.producer_util import read_all, read_committed

# Spark runs in every test here (make test-compat, which deselects spark, need not repeat them).
pytestmark = pytest.mark.spark

_STARTUP_TIMEOUT_S = 240.0


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def connect_url() -> Iterator[str]:
    """A local Spark Connect server (pyspark's sbin/start-connect-server.sh, foreground)."""
    work = Path(tempfile.mkdtemp(prefix="kafka_ds-connect-"))
    (port,) = nodeconf.free_ports(1)
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(SPARK_CONF_DIR),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(work), SPARK_PID_DIR=str(work), SPARK_LOCAL_IP="127.0.0.1")
    server = procs.spawn([str(spark_home() / "sbin" / "start-connect-server.sh"), "--wait",
                          "--conf", f"spark.connect.grpc.binding.port={port}",
                          "--conf", "spark.connect.grpc.binding.address=127.0.0.1"],
                         work / "server.log", cwd=work, env=env)
    try:
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Spark Connect server did not start:\n"
                                   + (work / "server.log").read_text()[-4000:])
            time.sleep(1.0)
        yield f"sc://127.0.0.1:{port}"
    finally:
        procs.terminate([server], timeout_s=30)


# What ``builder.remote()`` sets in os.environ: with it left behind, pyspark takes this whole
# process (and every subprocess it starts) for a Connect client, and the classic session the
# later test modules share fails ("Argument `col` should be Column or str, got Column").
_CONNECT_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_REMOTE")


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import is_remote

    saved = {name: os.environ.get(name) for name in _CONNECT_MODE_VARIABLES}
    session = SparkSession.builder.remote(connect_url).create()
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert not is_remote(), "the Connect session left this process in Connect mode"


def _produce(kafka: KafkaCluster, topic: str, count: int, tag: str) -> list[bytes]:
    from kafka_ds.client.producer import Producer

    values = [f"{tag}-{i}".encode() for i in range(count)]
    with Producer({"bootstrap.servers": kafka.bootstrap()}) as producer:
        for i, value in enumerate(values):
            producer.send(topic, value, key=f"k{i % 5}".encode())
    return values


def test_connect_batch_read_matches_other_client(kafka: KafkaCluster, topic_factory: Any,
                                                 remote: Any) -> None:
    topic = topic_factory(partitions=3)
    _produce(kafka, topic, 300, "read")
    df = (remote.read.format("pykafka")
          .option("kafka.bootstrap.servers", kafka.bootstrap())
          .option("subscribe", topic)
          .load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    ours = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]))
                  for r in df.collect())
    theirs = [(r.partition, r.offset, r.key, r.value) for r in read_all(kafka.bootstrap(), topic)]
    assert len(theirs) == 300
    assert ours == theirs


def test_connect_stream_write_is_exactly_once_across_restart(
        kafka: KafkaCluster, topic_factory: Any, remote: Any, tmp_path: Path) -> None:
    source, sink = topic_factory(partitions=2), topic_factory(partitions=2)
    checkpoint = str(tmp_path / "checkpoint")  # the server runs on this machine

    def run() -> str:
        query = (remote.readStream.format("pykafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap())
                 .option("subscribe", source)
                 .option("startingOffsets", "earliest")
                 .load()
                 .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
                 .writeStream.format("pykafka")
                 .option("kafka.bootstrap.servers", kafka.bootstrap())
                 .option("topic", sink)
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True)
                 .start())
        query.awaitTermination()
        assert query.exception() is None
        return str(query.id)

    first = _produce(kafka, source, 200, "first")
    query_id = run()
    second = _produce(kafka, source, 100, "second")
    assert run() == query_id  # the same query, restarted from its checkpoint

    expected = Counter(v.decode().upper().encode() for v in first + second)
    written = read_committed(kafka.bootstrap(), sink, expect=len(expected))
    assert Counter(r.value for r in written) == expected  # each row once, nothing lost
    # Written by the transactional path: the driver's commit intents, under the default prefix.
    intents = read_all(kafka.bootstrap(), f"pykafka-{query_id}.intent")
    assert intents, "no commit intent: the exactly-once commit did not run"


def test_connect_batch_write_append(kafka: KafkaCluster, topic_factory: Any,
                                    remote: Any) -> None:
    sink = topic_factory(partitions=2)
    rows = [(f"k{i}", f"v{i}") for i in range(50)]
    (remote.createDataFrame(rows, "key string, value string")
     .write.format("pykafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap())
     .option("topic", sink)
     .mode("append")
     .save())
    written = read_committed(kafka.bootstrap(), sink, expect=len(rows))
    assert sorted((r.key, r.value) for r in written) == sorted(
        (k.encode(), v.encode()) for k, v in rows)


def test_connect_explicit_registration_and_option_errors(kafka: KafkaCluster, topic: str,
                                                         remote: Any) -> None:
    """Registering from the client works too, and option errors reach the client intact."""
    from kafka_ds.spark import PyKafkaDataSource

    remote.dataSource.register(PyKafkaDataSource)
    reader = (remote.read.format("pykafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap())
              .option("subscribe", topic)
              .option("startingOffsets", "latest"))
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        reader.load().collect()

"""pytest fixtures and markers for tests against a real Kafka broker and a local Spark.

Enable with ``pytest_plugins = ["integration.harness.pytest_plugin"]`` in the root
conftest.py. Fixtures (clusters and Spark start lazily, on first use, once per run):

* ``kafka`` -> KafkaCluster: one node, session-scoped, with an MIT KDC and the SASL_GSSAPI
  listener where a KDC can run (``kdc.py`` installs it with apt-get when it may).
* ``kerberized_kafka`` -> the same cluster, for GSSAPI tests: skips, with the reason, where no
  KDC or no ``gssapi`` package is available, and fails instead when
  ``$KAFKA_DS_REQUIRE_KERBEROS`` is set (CI sets it: there both must be present).
* ``kafka_cluster3`` -> KafkaCluster: three nodes, session-scoped (tests using it are
  marked ``cluster`` automatically).
* ``proxied_kafka`` -> ProxiedKafkaCluster: one node whose clients (bootstrapping from
  ``proxy_bootstrap()``) go through a fault-injecting ``KafkaProxy``; session-scoped.
* ``proxied`` -> the same, for one test: its proxy is reset when the test ends.
* ``spark`` -> SparkSession: one per run, with Spark's JVM Kafka connector on spark.jars
  (tests using it are marked ``spark`` automatically).
* ``topic_factory`` -> ``make(partitions=1, replication_factor=1, config=None,
  cluster=None) -> str``: creates a uniquely named topic (default on ``kafka``).
* ``topic`` -> str: a fresh one-partition topic on ``kafka``.

Markers: ``cluster`` (needs the 3-node cluster), ``slow`` (long runs), ``long`` (pipeline
fault scenarios of minutes each, left out of ``make test``), ``spark``.
Kafka version: ``--kafka-version X`` or ``$KAFKA_VERSION`` (default jars.DEFAULT_KAFKA_VERSION).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .cluster import KafkaCluster
from .jars import kafka_version as resolve_kafka_version

MARKERS = {
    "cluster": "needs the 3-node Kafka cluster (kafka_cluster3 fixture)",
    "slow": "long-running test (soak, large volumes); deselect with -m 'not slow'",
    "long": "pipeline fault scenarios of minutes each, outside `make test`: `make test-long`",
    "spark": "starts or uses the shared local SparkSession",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--kafka-version", default=None,
                     help="Apache Kafka version for broker fixtures (default: $KAFKA_VERSION "
                          "or the harness default, e.g. 4.4.0; 3.9.2 for compatibility runs)")


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")
    # A CI timeout sends SIGTERM; turning it into KeyboardInterrupt lets pytest run fixture
    # teardown, so brokers stop and temp dirs go (the JVMs would die anyway: pdeathsig).
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _sigterm_to_interrupt)


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Mark by fixture use, so `-m "not cluster"` / `-m "not spark"` need no manual markers.
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "kafka_cluster3" in fixtures:
            item.add_marker(pytest.mark.cluster)
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def kafka_version(request: pytest.FixtureRequest) -> str:
    return resolve_kafka_version(request.config.getoption("--kafka-version"))


@pytest.fixture(scope="session")
def kafka(kafka_version: str) -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=1, version=kafka_version, kerberos=True) as cluster:
        yield cluster


@pytest.fixture
def kerberized_kafka(kafka: KafkaCluster) -> KafkaCluster:
    reason = kafka.kerberos_unavailable
    if reason is None:
        try:
            import gssapi  # noqa: F401
        except ImportError:
            reason = ("the gssapi package is not installed (pip install 'kafka-ds[kerberos]', "
                      "after apt-get install libkrb5-dev)")
    if reason is not None:
        if os.environ.get("KAFKA_DS_REQUIRE_KERBEROS"):
            pytest.fail(f"KAFKA_DS_REQUIRE_KERBEROS is set but Kerberos cannot run: {reason}")
        pytest.skip(f"Kerberos unavailable: {reason}")
    return kafka


@pytest.fixture(scope="session")
def kafka_cluster3(kafka_version: str) -> Iterator[KafkaCluster]:
    with KafkaCluster(nodes=3, version=kafka_version) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def proxied_kafka(kafka_version: str) -> Iterator[Any]:
    from .proxy import ProxiedKafkaCluster

    with ProxiedKafkaCluster(nodes=1, version=kafka_version) as cluster:
        yield cluster


@pytest.fixture
def proxied(proxied_kafka: Any) -> Iterator[Any]:
    """The shared proxied broker; faults the test armed and did not use are disarmed (and
    requests it held go upstream) when it ends."""
    yield proxied_kafka
    proxied_kafka.proxy.reset()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from .jars import fetch_spark_kafka_jars
    from .spark import spark_session, stop_spark_session

    session = spark_session(fetch_spark_kafka_jars())
    yield session
    stop_spark_session()


def _topic_name(nodeid: str) -> str:
    # Readable prefix from the test name + random suffix: unique across tests and reruns.
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", nodeid.split("::")[-1]).strip("-")[:60]
    return f"{base or 'topic'}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic_factory(request: pytest.FixtureRequest) -> Callable[..., str]:
    """``make(partitions=1, replication_factor=1, config=None, cluster=None, name=None)``."""

    def make(partitions: int = 1, replication_factor: int = 1,
             config: dict[str, Any] | None = None, cluster: KafkaCluster | None = None,
             name: str | None = None) -> str:
        target = cluster or request.getfixturevalue("kafka")
        topic_name = name or _topic_name(request.node.nodeid)
        target.create_topic(topic_name, partitions, replication_factor, config)
        return topic_name

    return make


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    return topic_factory()

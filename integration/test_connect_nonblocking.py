"""A broker that is down or stalled must hold up only its own traffic, and a lookup whose
connection is cut during its handshake tries again.

The stalled broker is real: a node of a two-node cluster whose proxy swallows every
response (``KafkaProxy.blackhole``), so a new connection to it gets through TCP and then
waits for an ApiVersions answer that never comes, for the whole connection setup timeout
(30 s here). The producer and the fetcher must meanwhile serve the healthy node: its data
must arrive while that connect is still the first and only one the stalled node's proxy saw,
and long before the setup timeout could have ended it. (Before connects were non-blocking,
each one stopped the producer's sender thread, or the fetch loop, for the whole timeout.)
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.proxy import ProxiedKafkaCluster
from kafka_ds.client.cluster import Cluster, CoordinatorType
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.producer import Producer
from kafka_ds.net.future import RequestFuture
from kafka_ds.net.pool import NetworkClient
from kafka_ds.net.security import ConnectionConfig
from kafka_ds.protocol.errors import KafkaTimeoutError, NetworkError
from kafka_ds.protocol.messages.metadata import MetadataRequest

API_VERSIONS = 18
CONNECT_TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def two_nodes(kafka_version: str) -> Iterator[ProxiedKafkaCluster]:
    with ProxiedKafkaCluster(nodes=2, version=kafka_version) as cluster:
        yield cluster


def _split_topic(cluster: ProxiedKafkaCluster) -> tuple[str, dict[int, int]]:
    """A topic with one partition led by each node; returns it and {partition: leader}."""
    name = f"stall-{uuid.uuid4().hex[:10]}"
    cluster.create_topic(name, partitions=2)
    config = ClientConfig.from_properties({"bootstrap.servers": cluster.bootstrap()})
    with Cluster.connect(config) as lookup:
        info = lookup.topic(name)
    leaders = {p: part.leader_id for p, part in info.partitions.items()}
    assert len(set(leaders.values())) == 2, f"both partitions on one node: {leaders}"
    return name, leaders


def _through_proxy(cluster: ProxiedKafkaCluster, node_id: int) -> dict[str, str]:
    """Client properties that bootstrap from ``node_id``'s proxy (and learn only proxies)."""
    return {"bootstrap.servers": f"127.0.0.1:{cluster.proxied_ports[node_id][1]}",
            "socket.connection.setup.timeout.ms": str(CONNECT_TIMEOUT_MS),
            "request.timeout.ms": str(CONNECT_TIMEOUT_MS * 2)}


def _wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def stalled(two_nodes: ProxiedKafkaCluster) -> Iterator[ProxiedKafkaCluster]:
    yield two_nodes
    for proxy in two_nodes.proxies.values():
        proxy.reset()


def test_a_stalled_broker_does_not_hold_up_deliveries_to_a_healthy_one(
        stalled: ProxiedKafkaCluster) -> None:
    topic, leaders = _split_topic(stalled)
    healthy_node, stalled_node = leaders[0], leaders[1]
    stalled_proxy = stalled.proxies[stalled_node]
    before = stalled_proxy.snapshot()
    stalled_proxy.blackhole(CONNECT_TIMEOUT_MS * 4 / 1000)
    props = _through_proxy(stalled, healthy_node)
    props.update({"delivery.timeout.ms": str(CONNECT_TIMEOUT_MS * 4), "linger.ms": "0"})
    with Producer(props) as producer:
        # Partition 1 first: the sender starts connecting to its (stalled) leader.
        stuck = producer.send(topic, b"to-the-stalled-node", partition=1)
        _wait_for(lambda: stalled_proxy.since(before)["connections"] == 1, 30,
                  "the connect to the stalled node")
        connect_started = time.monotonic()
        healthy = [producer.send(topic, f"healthy-{n}".encode(), partition=0)
                   for n in range(20)]
        for future in healthy:
            future.result(timeout=CONNECT_TIMEOUT_MS * 2 / 1000)
        waited_s = time.monotonic() - connect_started
        # Delivered while the stalled connect was still pending: it is the only connection
        # the stalled node's proxy has seen (a timed-out connect would have been retried),
        # its ApiVersions answer was swallowed (the fault fired), and the setup timeout has
        # not passed yet.
        assert stalled_proxy.since(before)["connections"] == 1
        _wait_for(lambda: stalled_proxy.since(before)["swallowed_responses"] >= 1, 30,
                  "the swallowed ApiVersions answer")
        assert waited_s < CONNECT_TIMEOUT_MS / 1000, waited_s
        assert not stuck.done()
        offsets = sorted(future.result().offset for future in healthy)
        assert offsets == list(range(offsets[0], offsets[0] + 20))
        stalled_proxy.reset()  # the stalled node recovers: its record goes out as well
        assert stuck.result(timeout=CONNECT_TIMEOUT_MS * 3 / 1000).partition == 1


def test_a_stalled_broker_does_not_hold_up_fetches_from_a_healthy_one(
        stalled: ProxiedKafkaCluster) -> None:
    topic, leaders = _split_topic(stalled)
    healthy_node, stalled_node = leaders[0], leaders[1]
    with Producer({"bootstrap.servers": stalled.bootstrap()}) as producer:
        for partition in (0, 1):
            for n in range(50):
                producer.send(topic, f"{partition}-{n}".encode(), partition=partition)
        producer.flush()
    stalled_proxy = stalled.proxies[stalled_node]
    before = stalled_proxy.snapshot()
    stalled_proxy.blackhole(CONNECT_TIMEOUT_MS * 4 / 1000)
    props = _through_proxy(stalled, healthy_node)
    props["fetch.timeout.ms"] = str(CONNECT_TIMEOUT_MS * 4)
    started = time.monotonic()
    healthy_rows = 0
    with Fetcher.from_properties(props) as fetcher:
        batches = fetcher.read_arrow([(topic, 0, 0, 50), (topic, 1, 0, 50)])
        for batch in batches:
            partitions = set(batch.column("partition").to_pylist())
            assert partitions == {0}, "the stalled node's partition cannot have been read"
            healthy_rows += batch.num_rows
            if healthy_rows == 50:
                break
        waited_s = time.monotonic() - started
        assert healthy_rows == 50
        # All of the healthy partition was read while the connect to the stalled node was
        # still the first and only one, within its setup timeout.
        _wait_for(lambda: stalled_proxy.since(before)["swallowed_responses"] >= 1, 30,
                  "the swallowed ApiVersions answer")
        assert stalled_proxy.since(before)["connections"] == 1
        assert waited_s < CONNECT_TIMEOUT_MS / 1000, waited_s
        batches.close()  # type: ignore[attr-defined]


def test_a_blocking_connect_keeps_polling_the_other_connections(kafka: KafkaCluster) -> None:
    """``connection()`` for lookups still waits for its connect, but polls meanwhile: a
    response from a healthy broker completes while the wait for a silent one goes on."""
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (in the kernel), never answers
    try:
        bootstrap = f"127.0.0.1:{silent.getsockname()[1]},{kafka.bootstrap()}"
        events: list[str] = []
        with NetworkClient(bootstrap, ConnectionConfig(connect_timeout_ms=5_000)) as client:
            healthy, stalled = -2, -1  # bootstrap ids, in the order given
            client.connection(healthy)
            future = client.send(healthy, MetadataRequest(topics=[]))

            def answered(done: RequestFuture[Any]) -> None:
                events.append("healthy answered" if done.succeeded() else "healthy failed")

            future.add_callback(answered)
            with pytest.raises(KafkaTimeoutError, match="did not finish connecting within"):
                client.connection(stalled)
            events.append("stalled connect timed out")
        assert events == ["healthy answered", "stalled connect timed out"]
    finally:
        silent.close()


@pytest.fixture
def one_proxied(proxied_kafka: ProxiedKafkaCluster) -> Iterator[ProxiedKafkaCluster]:
    yield proxied_kafka
    proxied_kafka.proxy.reset()


def _proxy_cluster(cluster: ProxiedKafkaCluster) -> Cluster:
    return Cluster.connect(ClientConfig.from_properties(
        {"bootstrap.servers": cluster.proxy_bootstrap()}))


def test_a_metadata_lookup_retries_a_connection_cut_during_api_versions(
        one_proxied: ProxiedKafkaCluster) -> None:
    name = f"cut-{uuid.uuid4().hex[:10]}"
    one_proxied.create_topic(name)
    proxy = one_proxied.proxy
    before = proxy.snapshot()
    proxy.cut_after_responses(1, api_keys={API_VERSIONS})
    with _proxy_cluster(one_proxied) as cluster:
        assert cluster.topic(name).partition_count == 1
    # The first connection was cut at its ApiVersions answer; a second one served the lookup.
    assert proxy.since(before)["cut_responses"] == 1
    assert proxy.since(before)["connections"] == 2


def test_a_coordinator_lookup_retries_a_connection_cut_during_api_versions(
        one_proxied: ProxiedKafkaCluster) -> None:
    proxy = one_proxied.proxy
    before = proxy.snapshot()
    proxy.cut_after_responses(1, api_keys={API_VERSIONS})
    with _proxy_cluster(one_proxied) as cluster:
        node = cluster.coordinator(CoordinatorType.GROUP, f"g-{uuid.uuid4().hex[:8]}",
                                   timeout_ms=30_000)
        assert node in cluster.client.known_nodes()
    assert proxy.since(before)["cut_responses"] == 1


def test_connections_cut_at_api_versions_twice_running_still_fail_fast(
        one_proxied: ProxiedKafkaCluster) -> None:
    # Twice running on fresh connections is what a listener expecting TLS does to a
    # plaintext client: the error saying so is raised, not retried until the timeout.
    proxy = one_proxied.proxy
    before = proxy.snapshot()
    proxy.cut_after_responses(2, api_keys={API_VERSIONS})
    with _proxy_cluster(one_proxied) as cluster, \
            pytest.raises(NetworkError, match=r"during API_VERSIONS.*security\.protocol"):
        cluster.refresh(timeout_ms=60_000)
    assert proxy.since(before)["cut_responses"] == 2

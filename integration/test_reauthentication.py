"""KIP-368 re-authentication against a real broker whose SASL sessions last 10 seconds.

The harness listener SASL_REAUTH sets ``connections.max.reauth.ms=10000``: a connection that
does not authenticate again before its session ends is closed by the broker at its next
request. Each test counts, for itself alone, the connections kafka_ds opens (a wrapper around
the transport's ``open_socket``, which every connect goes through) and the
re-authentications the connection metrics record, so a test passes only if the same
connections stayed up and re-authenticated, never by reconnecting.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.harness.listeners import REAUTH_MS, unsecured_jwt
from integration.producer_util import read_all
from integration.props import kafka_ds_properties
from kafka_ds.client.cluster import Cluster
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetch_config import FetchConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.client.offsets import latest_offsets
from kafka_ds.client.producer import Producer
from kafka_ds.net import broker_conn
from kafka_ds.protocol.messages.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from kafka_ds.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from kafka_ds.protocol.types import TopicPartition

RUN_S = 60


class _ConnectCounter:
    """Counts the sockets kafka_ds's connections open during one test."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        self._real = broker_conn.open_socket

    def __call__(self, *args: Any, **kwargs: Any) -> socket.socket:
        with self._lock:
            self.count += 1
        return self._real(*args, **kwargs)


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> Iterator[_ConnectCounter]:
    counter = _ConnectCounter()
    monkeypatch.setattr(broker_conn, "open_socket", counter)
    yield counter


def _produce_for(producer: Producer, topic: str, stop: threading.Event,
                 sent: list[bytes], errors: list[BaseException]) -> None:
    """Send numbered records without waiting for each (pipelined), until ``stop``."""
    try:
        for number in itertools.count():
            if stop.is_set():
                break
            value = f"record-{number:08d}".encode()
            producer.send(topic, value, key=str(number % 7).encode())
            sent.append(value)
            if number % 50 == 49:
                time.sleep(0.05)  # ~1000 records/s: steady traffic, not a flood
        producer.flush()
    except BaseException as exc:  # surfaced by the test thread
        errors.append(exc)


def test_a_minute_of_produce_and_fetch_reauthenticates_without_losing_a_record(
        kafka: KafkaCluster, topic_factory, connects: _ConnectCounter) -> None:
    topic = topic_factory(partitions=2)
    props = kafka_ds_properties(kafka, "SASL_REAUTH", mechanism="SCRAM-SHA-256")
    props.update({"linger.ms": "5", "enable.idempotence": "true"})
    producer = Producer(props)
    fetch_props = kafka_ds_properties(kafka, "SASL_REAUTH", mechanism="SCRAM-SHA-256")
    fetch_props["fetch.max.wait.ms"] = "300"
    fetcher = Fetcher(Cluster.connect(ClientConfig.from_properties(fetch_props)),
                      FetchConfig.from_properties(fetch_props), owns_cluster=True)
    producer_metrics = producer._sender.client.metrics.snapshot()
    fetcher_metrics = fetcher.cluster.client.metrics.snapshot()
    sent: list[bytes] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    thread = threading.Thread(target=_produce_for, args=(producer, topic, stop, sent, errors),
                              daemon=True)
    fetched: dict[int, list[bytes]] = {0: [], 1: []}
    positions = {0: 0, 1: 0}
    connects_after_warmup: int | None = None
    started = time.monotonic()
    thread.start()
    try:
        # Read what has been written so far, again and again, while the producer writes: both
        # clients' connections are busy whenever their sessions come up for renewal.
        while True:
            running = time.monotonic() - started < RUN_S
            if not running:
                stop.set()
                thread.join(timeout=60)
                assert not thread.is_alive(), "the producer did not finish flushing"
            latest = latest_offsets(fetcher.cluster,
                                    [TopicPartition(topic, p) for p in positions])
            ranges = [(topic, p, positions[p], latest[TopicPartition(topic, p)])
                      for p in positions if latest[TopicPartition(topic, p)] > positions[p]]
            for batch in fetcher.read_arrow(ranges):
                partitions = batch.column("partition").to_pylist()
                offsets = batch.column("offset").to_pylist()
                values = batch.column("value").to_pylist()
                for partition, offset, value in zip(partitions, offsets, values, strict=True):
                    assert offset == positions[partition], "a gap or a repeat in the fetch"
                    positions[partition] = offset + 1
                    fetched[partition].append(value)
            if connects_after_warmup is None and time.monotonic() - started > 3:
                # Both clients have connected to every broker they use by now, and no
                # session (REAUTH_MS) has come up for renewal yet.
                connects_after_warmup = connects.count
            if not running:
                break
            time.sleep(0.2)
    finally:
        stop.set()
        producer.close()
        fetcher.close()
    assert not errors, errors
    assert len(sent) > 10_000

    # Nothing lost, nothing written twice: our fetcher read exactly what was sent (per
    # partition in send order), and so did an independent client.
    ours = fetched[0] + fetched[1]
    assert sorted(ours) == sorted(sent) and len(set(ours)) == len(sent)
    independent = read_all(kafka.bootstrap("PLAINTEXT"), topic, expect=len(sent))
    assert sorted(r.value for r in independent) == sorted(sent)

    # It happened by re-authenticating the same connections, not by reconnecting.
    assert connects.count == connects_after_warmup
    for metrics, before in ((producer._sender.client.metrics, producer_metrics),
                            (fetcher.cluster.client.metrics, fetcher_metrics)):
        reauthentications = metrics.reauthentications - before.reauthentications
        # A session lasts REAUTH_MS; renewed at 85-95 % of it, each connection renews at least
        # RUN_S / REAUTH_MS - 1 times (5 here).
        assert reauthentications >= RUN_S * 1000 // REAUTH_MS - 1, metrics
        assert metrics.reauthentication_failures == before.reauthentication_failures
        assert metrics.expired_sessions_closed == before.expired_sessions_closed
    # Some renewals found requests in flight or had requests wait: the pipelined case ran.
    busy = sum(m.requests_in_flight_at_reauthentication + m.requests_held_for_reauthentication
               for m in (producer._sender.client.metrics, fetcher.cluster.client.metrics))
    assert busy > 0


def _poll_cluster(cluster: Cluster, topic: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        cluster.refresh([topic])
        time.sleep(0.3)


def test_a_token_file_is_read_again_at_each_reauthentication(
        kafka: KafkaCluster, topic: str, tmp_path: Path, connects: _ConnectCounter) -> None:
    # Every token written here expires TOKEN_S after it is written; the broker's session ends
    # when the token does (or after REAUTH_MS). The connection outlives the first token by far,
    # which only fresh tokens, read from the rewritten file, make possible.
    token_s = 13
    token_file = tmp_path / "token"
    token_file.write_text(unsecured_jwt(lifetime_s=token_s) + "\n")
    written = [time.monotonic()]
    stop = threading.Event()

    def rotate() -> None:
        while not stop.wait(2.0):
            fresh = tmp_path / "token.new"
            fresh.write_text(unsecured_jwt(lifetime_s=token_s) + "\n")
            fresh.replace(token_file)  # atomic, as a rotating agent does

    props = kafka_ds_properties(kafka, "SASL_REAUTH", mechanism="OAUTHBEARER")
    del props["sasl.oauthbearer.token"]
    props["sasl.oauthbearer.token.endpoint.url"] = f"file:{token_file}"
    rotator = threading.Thread(target=rotate, daemon=True)
    rotator.start()
    try:
        with Cluster.connect(ClientConfig.from_properties(props)) as cluster:
            cluster.refresh([topic])
            opened = connects.count
            _poll_cluster(cluster, topic, 3 * token_s)
            metrics = cluster.client.metrics
            assert connects.count == opened
            assert metrics.reauthentications >= 3 and metrics.reauthentication_failures == 0
            assert time.monotonic() - written[0] > 2 * token_s
    finally:
        stop.set()


def test_the_unsecured_development_token_is_minted_again_at_each_reauthentication(
        kafka: KafkaCluster, topic: str, connects: _ConnectCounter) -> None:
    props = kafka_ds_properties(kafka, "SASL_REAUTH", mechanism="OAUTHBEARER")
    del props["sasl.oauthbearer.token"]
    lifetime_s = 12
    props["sasl.jaas.config"] = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'unsecuredLoginStringClaim_sub="dev" unsecuredLoginLifetimeSeconds="{lifetime_s}";')
    with Cluster.connect(ClientConfig.from_properties(props)) as cluster:
        cluster.refresh([topic])
        opened = connects.count
        _poll_cluster(cluster, topic, 3 * lifetime_s)
        assert connects.count == opened
        assert cluster.client.metrics.reauthentications >= 3
        assert cluster.client.metrics.reauthentication_failures == 0


def test_requests_in_flight_or_sent_during_a_reauthentication_are_answered_in_order(
        kafka: KafkaCluster, topic: str, connects: _ConnectCounter) -> None:
    props = kafka_ds_properties(kafka, "SASL_REAUTH", mechanism="PLAIN")
    with Cluster.connect(ClientConfig.from_properties(props)) as cluster:
        client = cluster.client
        info = cluster.topic(topic)
        node = cluster.leader_for(topic, 0)
        connection = client.connection(node)
        before = client.metrics.snapshot()
        opened = connects.count
        # A Fetch the broker holds for up to 2 s (the topic is empty) is in flight...
        fetch = client.send(node, FetchRequest(
            max_wait_ms=2000, min_bytes=1, session_epoch=-1,
            topics=[FetchTopic(topic=topic, topic_id=info.topic_id, partitions=[
                FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)])]))
        # ... when the session comes up for renewal (brought forward: the schedule is the only
        # thing this test changes).
        connection.reauthenticate_at_ms = client.clock.monotonic_ms()
        client.poll(0)
        assert connection.reauthenticating and not fetch.done()
        # A request sent now must wait: the broker takes nothing but SASL until it is done.
        metadata = client.send(node, MetadataRequest(topics=[MetadataRequestTopic(name=topic)]))
        assert client.poll_until(metadata.done, 15_000)
        assert fetch.succeeded() and metadata.succeeded(), (fetch.error, metadata.error)
        assert isinstance(fetch.result(), FetchResponse)
        assert metadata.result().topics[0].name == topic
        metrics = client.metrics
        assert metrics.reauthentications == before.reauthentications + 1
        assert (metrics.requests_in_flight_at_reauthentication
                == before.requests_in_flight_at_reauthentication + 1)
        assert (metrics.requests_held_for_reauthentication
                == before.requests_held_for_reauthentication + 1)
        assert not connection.reauthenticating and connection.connected
        assert connects.count == opened


def test_a_connection_left_idle_past_its_session_is_replaced_before_use(
        kafka: KafkaCluster, topic: str, connects: _ConnectCounter) -> None:
    # Nobody polls between two Spark micro-batches: the session runs out unrenewed, and the
    # broker would close the connection at its next request. It must be replaced first.
    props = kafka_ds_properties(kafka, "SASL_REAUTH", mechanism="SCRAM-SHA-512")
    with Cluster.connect(ClientConfig.from_properties(props)) as cluster:
        cluster.refresh([topic])
        connection = cluster.client.any_connection()
        assert connection.session_expires_at_ms is not None
        opened = connects.count
        while not connection.session_expired(cluster.client.clock.monotonic_ms()):
            time.sleep(0.2)
        time.sleep(0.5)  # and the broker's own clock, which started a little later
        cluster.refresh([topic])  # must not fail with "broker closed the connection"
        assert cluster.topic(topic).partition_count == 1
        assert cluster.client.metrics.expired_sessions_closed == 1
        assert connects.count == opened + 1

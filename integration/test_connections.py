"""kafka_ds's own connections against the real broker: every listener, and every way to fail.

Each failure must be fast and say what to fix: a wrong password is an AuthenticationError,
not a hang; a TLS/plaintext mix-up names security.protocol; nothing waits past its timeout.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from integration.harness.cluster import KafkaCluster
from integration.props import kafka_ds_properties
from kafka_ds.client.cluster import Cluster, UnknownTopicError
from kafka_ds.client.config import ClientConfig
from kafka_ds.client.fetcher import Fetcher
from kafka_ds.net import broker_conn
from kafka_ds.protocol.api_keys import ApiKey
from kafka_ds.protocol.errors import (
    AuthenticationError,
    ConfigError,
    KafkaTimeoutError,
    NetworkError,
)

LISTENERS = [
    ("PLAINTEXT", {}),
    ("SASL_PLAIN", {}),
    ("SASL_SCRAM", {"mechanism": "SCRAM-SHA-256"}),
    ("SASL_SCRAM", {"mechanism": "SCRAM-SHA-512"}),
    ("SASL_OAUTH", {}),
    ("SSL", {}),
    ("MTLS", {}),
    ("SASL_SSL", {"mechanism": "SCRAM-SHA-256"}),
    ("SASL_SSL", {"mechanism": "SCRAM-SHA-512"}),
]


def _connect(props: dict[str, str]) -> Cluster:
    return Cluster.connect(ClientConfig.from_properties(props))


@pytest.mark.parametrize(("listener", "kwargs"), LISTENERS,
                         ids=[f"{name}-{kw.get('mechanism', '')}".rstrip("-")
                              for name, kw in LISTENERS])
def test_metadata_over_every_listener(kafka: KafkaCluster, topic_factory, listener: str,
                                      kwargs: dict[str, str]) -> None:
    topic = topic_factory(partitions=3)
    with _connect(kafka_ds_properties(kafka, listener, **kwargs)) as cluster:
        info = cluster.topic(topic)
        assert sorted(info.partitions) == [0, 1, 2]
        assert all(p.leader_id == 1 for p in info.partitions.values())
        connection = cluster.client.any_connection()
        # Negotiated from the broker's ApiVersions, not assumed.
        assert connection.api_versions[ApiKey.METADATA] == min(
            13, connection.api_ranges[ApiKey.METADATA][1])
        assert "metadata.version" in connection.finalized_features


def test_oauthbearer_from_the_java_unsecured_jaas_options(kafka: KafkaCluster, topic) -> None:
    props = kafka_ds_properties(kafka, "SASL_OAUTH")
    del props["sasl.oauthbearer.token"]
    props["sasl.jaas.config"] = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="me";')
    with _connect(props) as cluster:
        assert cluster.topic(topic).partition_count == 1


@pytest.mark.parametrize(("listener", "mechanism"), [("SASL_PLAIN", None),
                                                     ("SASL_SCRAM", "SCRAM-SHA-256"),
                                                     ("SASL_SCRAM", "SCRAM-SHA-512")])
def test_wrong_password_fails_fast_with_authentication_error(kafka: KafkaCluster, topic,
                                                             listener: str,
                                                             mechanism: str | None) -> None:
    kwargs = {"password": "not-the-password"}
    if mechanism:
        kwargs["mechanism"] = mechanism
    # "Fast": not retried until a timeout. With the timeouts this long, a bound of half of
    # one has all the slack a loaded machine needs, and still catches a retry loop.
    timeout_ms = 40_000
    props = {**kafka_ds_properties(kafka, listener, **kwargs),
             "request.timeout.ms": str(timeout_ms),
             "socket.connection.setup.timeout.ms": str(timeout_ms)}
    started = time.monotonic()
    with _connect(props) as cluster, \
            pytest.raises(AuthenticationError, match=r"(?i)authentication.*failed") as caught:
        cluster.topic(topic, timeout_ms=timeout_ms)
    assert time.monotonic() - started < timeout_ms / 1000 / 2
    assert "not-the-password" not in str(caught.value)


def test_untrusted_certificate_is_an_authentication_error(kafka: KafkaCluster, topic) -> None:
    props = kafka_ds_properties(kafka, "SSL")
    del props["ssl.truststore.location"]  # the system CAs do not know the harness CA
    with _connect(props) as cluster, pytest.raises(AuthenticationError, match="truststore"):
        cluster.topic(topic)


def test_a_configured_truststore_replaces_the_system_cas(kafka: KafkaCluster, topic,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Make the CA that signed the broker a "system" CA: OpenSSL reads SSL_CERT_FILE when it
    # loads the default store.
    monkeypatch.setenv("SSL_CERT_FILE", str(kafka.tls.ca_pem))
    props = kafka_ds_properties(kafka, "SSL")
    del props["ssl.truststore.location"]
    with _connect(props) as cluster:  # no CA configured: the system store, which now vouches
        assert cluster.topic(topic).partition_count == 1
    # A private CA configured: only it is trusted, so a certificate chaining to a system CA
    # (anyone's publicly trusted certificate for the broker's name) must be refused.
    props["ssl.truststore.location"] = str(kafka.tls.untrusted_ca_pem)
    with _connect(props) as cluster, pytest.raises(AuthenticationError, match="truststore"):
        cluster.topic(topic)


class _OpenCounter:
    """Counts the sockets kafka_ds's connections open (every connect goes through it)."""

    def __init__(self) -> None:
        self.count = 0
        self._real = broker_conn.open_socket

    def __call__(self, *args: Any, **kwargs: Any) -> socket.socket:
        self.count += 1
        return self._real(*args, **kwargs)


@pytest.mark.parametrize("refusal", ["our certificate", "theirs"])
def test_a_refused_certificate_fails_a_fetch_at_once(kafka: KafkaCluster, topic,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    refusal: str) -> None:
    if refusal == "our certificate":  # MTLS without a client certificate
        props = kafka_ds_properties(kafka, "MTLS")
        del props["ssl.keystore.location"]
        message = "ssl.keystore.location"
    else:  # a broker certificate our truststore does not vouch for
        props = kafka_ds_properties(kafka, "SSL")
        props["ssl.truststore.location"] = str(kafka.tls.untrusted_ca_pem)
        message = "ssl.truststore.location"
    props["fetch.timeout.ms"] = "20000"
    opens = _OpenCounter()
    monkeypatch.setattr(broker_conn, "open_socket", opens)
    started = time.monotonic()
    with Fetcher.from_properties(props) as fetcher, \
            pytest.raises(AuthenticationError, match=re.escape(message)):
        list(fetcher.read_arrow([(topic, 0, 0, 1)]))
    # Not retried until fetch.timeout.ms (it used to reconnect ~4 times a second for all of it).
    assert opens.count == 1
    assert time.monotonic() - started < 10


def test_hostname_must_match_the_certificate(kafka: KafkaCluster, topic, tmp_path) -> None:
    # The broker certificate names 127.0.0.1 and localhost. Dial it by another name for the
    # same address: verification must refuse, and pass once it is explicitly turned off.
    alias = socket.gethostname()
    try:
        address = socket.gethostbyname(alias)
    except OSError:
        pytest.skip("this machine's hostname does not resolve")
    props = kafka_ds_properties(kafka, "SSL")
    port = kafka.port(1, "SSL")
    if not address.startswith("127."):
        # Reach the loopback listener through a forwarder bound to the host's address.
        forward = _Forwarder(address, ("127.0.0.1", port))
        port = forward.port
    props["bootstrap.servers"] = f"{alias}:{port}"
    with _connect(props) as cluster, pytest.raises(AuthenticationError,
                                                   match=r"(?i)hostname|IP address mismatch"):
        cluster.client.any_connection()
    props["ssl.endpoint.identification.algorithm"] = ""
    with _connect(props) as cluster:
        connection = cluster.client.any_connection()
        assert connection.connected


def test_client_certificate_is_required_on_mtls(kafka: KafkaCluster, topic) -> None:
    props = kafka_ds_properties(kafka, "MTLS")
    del props["ssl.keystore.location"]
    with _connect(props) as cluster, pytest.raises(AuthenticationError,
                                                   match="client certificate") as caught:
        cluster.topic(topic)
    assert "ssl.keystore.location" in str(caught.value)


@pytest.mark.parametrize(("client_listener", "server_listener", "message"), [
    ("PLAINTEXT", "SSL", "security.protocol"),
    ("SSL", "PLAINTEXT", "TLS"),
    ("PLAINTEXT", "SASL_PLAIN", "security.protocol"),
])
def test_security_protocol_mismatch_fails_fast_and_says_so(kafka: KafkaCluster, topic,
                                                           client_listener: str,
                                                           server_listener: str,
                                                           message: str) -> None:
    props = kafka_ds_properties(kafka, client_listener)
    props["bootstrap.servers"] = kafka.bootstrap(server_listener)
    # "Fast": the mismatch is recognised, not waited out: half the setup timeout is a bound
    # with ample slack on a loaded machine.
    setup_timeout_ms = 40_000
    props["socket.connection.setup.timeout.ms"] = str(setup_timeout_ms)
    started = time.monotonic()
    with _connect(props) as cluster, pytest.raises(NetworkError, match=message):
        cluster.topic(topic)
    assert time.monotonic() - started < setup_timeout_ms / 1000 / 2


def test_bootstrap_rotation_skips_a_dead_address(kafka: KafkaCluster, topic) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now: connecting is refused
    props = kafka_ds_properties(kafka, "PLAINTEXT")
    props["bootstrap.servers"] = f"127.0.0.1:{dead_port},{props['bootstrap.servers']}"
    with _connect(props) as cluster:
        assert cluster.topic(topic).partition_count == 1


def test_no_reachable_broker_lists_every_failure() -> None:
    ports = []
    for _ in range(2):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        ports.append(probe.getsockname()[1])
        probe.close()
    props = {"bootstrap.servers": ",".join(f"127.0.0.1:{port}" for port in ports)}
    with _connect(props) as cluster, pytest.raises(NetworkError) as caught:
        cluster.topic("anything")
    for port in ports:
        assert f"127.0.0.1:{port} refused" in str(caught.value)


def test_unknown_topic_is_named(kafka: KafkaCluster) -> None:
    with _connect(kafka_ds_properties(kafka)) as cluster, \
            pytest.raises(UnknownTopicError, match="'no-such-topic'"):
        cluster.topic("no-such-topic")


def test_bad_configuration_is_rejected_before_any_io() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        ClientConfig.from_properties({})
    with pytest.raises(ConfigError, match=r"security\.protocol"):
        ClientConfig.from_properties({"bootstrap.servers": "h:1", "security.protocol": "TLS"})
    with pytest.raises(ConfigError, match="GSSAPI"):
        ClientConfig.from_properties({"bootstrap.servers": "h:1",
                                      "security.protocol": "SASL_SSL"})
    with pytest.raises(ConfigError, match=r"ssl\.truststore\.location=/x\.jks"):
        ClientConfig.from_properties({"bootstrap.servers": "h:1", "security.protocol": "SSL",
                                      "ssl.truststore.location": "/x.jks",
                                      "ssl.truststore.type": "JKS"})
    with pytest.raises(ConfigError, match=r"request\.timeout\.ms"):
        ClientConfig.from_properties({"bootstrap.servers": "h:1", "request.timeout.ms": "soon"})


def test_secrets_stay_out_of_repr() -> None:
    config = ClientConfig.from_properties({
        "bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'x.PlainLoginModule required username="u" password="hunter2";'})
    assert config.connection.sasl is not None
    assert config.connection.sasl.password == "hunter2"
    assert "hunter2" not in repr(config)


class _Silent:
    """A TCP server that accepts connections and never answers: a hung broker."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen()
        self.port = self.server.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.server.close()
        for conn in self.accepted:
            conn.close()


class _Forwarder:
    """Forwards connections from (host, 0) to ``target``; used to dial TLS by another name."""

    def __init__(self, host: str, target: tuple[str, int]) -> None:
        self.server = socket.socket()
        self.server.bind((host, 0))
        self.server.listen()
        self.port = self.server.getsockname()[1]
        self.target = target
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            sink.close()


@pytest.fixture
def silent_server() -> Iterator[_Silent]:
    server = _Silent()
    yield server
    server.close()


def test_a_broker_that_never_answers_times_out(silent_server: _Silent) -> None:
    # A real broker cannot be made to hang on demand; this stand-in accepts and stays silent.
    # The connection setup timeout (700 ms) bounds the wait, not request.timeout.ms (made
    # long here): half of the latter leaves a loaded machine ample slack.
    request_timeout_ms = 40_000
    props = {"bootstrap.servers": f"127.0.0.1:{silent_server.port}",
             "socket.connection.setup.timeout.ms": "700",
             "request.timeout.ms": str(request_timeout_ms)}
    started = time.monotonic()
    with _connect(props) as cluster, pytest.raises(KafkaTimeoutError, match="700 ms"):
        cluster.topic("anything")
    assert time.monotonic() - started < request_timeout_ms / 1000 / 2


def test_a_connection_closed_between_polls_is_replaced_on_a_reused_fd(kafka: KafkaCluster) -> None:
    """A connection that closes itself outside ``poll`` (a failed write does) leaves its socket
    registered with the selector; the new socket usually gets the same fd number back from
    the kernel. Found by the pipeline proxy test as ``KeyError: ... is already registered``."""
    with _connect(kafka_ds_properties(kafka, "PLAINTEXT")) as cluster:
        client = cluster.client
        old = client.any_connection()
        node_id = old.node_id
        assert old.sock is not None
        old_fd = old.sock.fileno()
        old.close(NetworkError("cut by the test"))  # as a failed send would
        new = client.connection(node_id)
        assert new is not old and new.connected
        assert new.sock is not None and new.sock.fileno() == old_fd  # the fault's precondition
        # The replacement works: a metadata request goes over it and gets its answer.
        cluster.refresh(timeout_ms=10_000)
        assert client.connection(node_id) is new and new.connected

"""A TLS 1.3 server that refuses a client without a certificate (alert CERTIFICATE_REQUIRED).

The harness broker (a JVM) answers a missing client certificate with bad_certificate; OpenSSL
servers send TLS 1.3's certificate_required. This small local server (throwaway material from
the harness's generator) produces the latter, so both alerts are known to be
``AuthenticationError``s naming ``ssl.keystore.location``, raised once and not retried.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.harness import tls
from kafka_ds.net.pool import NetworkClient
from kafka_ds.net.security import ConnectionConfig, SecurityProtocol, TlsConfig
from kafka_ds.protocol.errors import AuthenticationError


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> tls.TlsMaterial:
    return tls.generate(tmp_path_factory.mktemp("tls"))


class _MutualTlsServer:
    """Demands a client certificate signed by the test CA; counts the handshakes tried."""

    def __init__(self, material: tls.TlsMaterial) -> None:
        directory = Path(material.directory)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_3
        self.context.load_cert_chain(directory / "broker.pem", directory / "broker.key")
        self.context.load_verify_locations(material.ca_pem)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.handshakes = 0
        self.refusals: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.handshakes += 1
            secured = self.context.wrap_socket(conn, server_side=True,
                                               do_handshake_on_connect=False)
            try:
                secured.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                self.refusals.append(str(exc))
                # Read what the client sent before closing, as a broker does: closing with
                # unread bytes makes the kernel reset the connection, and the reset can
                # overtake the alert on its way to the client.
                with socket.socket(fileno=os.dup(secured.fileno())) as raw, \
                        contextlib.suppress(OSError):
                    raw.settimeout(2)
                    while raw.recv(4096):
                        pass
            finally:
                secured.close()

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def server(material: tls.TlsMaterial) -> Iterator[_MutualTlsServer]:
    running = _MutualTlsServer(material)
    yield running
    running.close()


def test_certificate_required_is_an_authentication_error_raised_once(
        server: _MutualTlsServer, material: tls.TlsMaterial) -> None:
    config = ConnectionConfig(security_protocol=SecurityProtocol.SSL,
                              tls=TlsConfig(truststore_location=str(material.ca_pem)),
                              connect_timeout_ms=10_000, reconnect_backoff_ms=60_000,
                              reconnect_backoff_max_ms=60_000)
    with NetworkClient(f"127.0.0.1:{server.port}", config) as client:
        with pytest.raises(AuthenticationError, match=r"ssl\.keystore\.location") as refused:
            client.any_connection()
        assert "CERTIFICATE_REQUIRED" in str(refused.value)
        assert client.metrics.connection_attempts == 1 and server.handshakes == 1
        assert server.refusals  # the server did refuse us: the fault fired
        # Configuration, not availability: the next call fails the same way at once, with
        # no reconnect backoff (60 s here) in front of it.
        with pytest.raises(AuthenticationError):
            client.any_connection()
        assert client.metrics.connection_attempts == 2


def test_a_client_certificate_it_trusts_is_accepted(server: _MutualTlsServer,
                                                     material: tls.TlsMaterial) -> None:
    context = TlsConfig(truststore_location=str(material.ca_pem),
                        keystore_location=str(material.client_combined_pem)).build_context()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as secured:
        assert secured.version() == "TLSv1.3"

"""Java-style TLS stores read into an ``SSLContext``: which formats, which errors, and that no
key file is left anywhere.

The stores are the harness's (``integration.harness.tls``): made by openssl and by the JDK's
keytool, as Java users make theirs. The oracle for "the material is right" is OpenSSL itself:
the context's CA list, and a TLS handshake with a local server that demands a client
certificate signed by the test CA.
"""

from __future__ import annotations

import os
import socket
import ssl
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration.harness import tls
from integration.props import STORE_KINDS, java_tls_stores
from kafka_ds.client.config import ClientConfig
from kafka_ds.net import keystores, security
from kafka_ds.net.security import TlsConfig
from kafka_ds.protocol.errors import ConfigError

WRONG = "not-the-password-4711"


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> tls.TlsMaterial:
    return tls.generate(tmp_path_factory.mktemp("tls"))


def _java(material: tls.TlsMaterial, **options: str) -> dict[str, str]:
    return {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL", **options}


def _stores(material: tls.TlsMaterial) -> dict[str, dict[str, str]]:
    return {kind: java_tls_stores(material, kind) for kind in STORE_KINDS}


class _Server:
    """A TLS 1.3 server with the broker certificate that demands a client certificate signed
    by the test CA; records the subject of each client it accepted."""

    def __init__(self, material: tls.TlsMaterial) -> None:
        directory = Path(material.directory)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(directory / "broker.pem", directory / "broker.key")
        self.context.load_verify_locations(material.ca_pem)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.clients: list[Any] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(conn, server_side=True) as secured:
                    self.clients.append(secured.getpeercert()["subject"])
                    secured.sendall(b"ok")
            except (ssl.SSLError, OSError):
                conn.close()


@pytest.fixture(scope="module")
def server(material: tls.TlsMaterial) -> Iterator[_Server]:
    running = _Server(material)
    yield running
    running.server.close()


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_each_kind_of_store_trusts_the_ca_and_presents_the_client_certificate(
        material: tls.TlsMaterial, server: _Server, kind: str) -> None:
    config = ClientConfig.from_properties(_java(material, **_stores(material)[kind]))
    assert config.connection.tls is not None
    context = config.connection.tls.build_context()
    assert [dict(item[0] for item in ca["subject"]) for ca in context.get_ca_certs()] == [
        {"commonName": "kafka-ds-test-ca"}]
    accepted = len(server.clients)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as secured:
        assert secured.recv(2) == b"ok"
    assert server.clients[accepted:] == [((("commonName", tls.CLIENT_CN),),)]


def _error(properties: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as raised:
        ClientConfig.from_properties(properties)
    return str(raised.value)


@pytest.mark.parametrize(("option", "store", "also"), [
    ("ssl.truststore.password", "broker_truststore_p12", {}),
    ("ssl.truststore.password", "truststore_jks", {}),
    ("ssl.keystore.password", "client_keystore_keytool_p12", {}),
    ("ssl.keystore.password", "client_keystore_jks", {}),
    ("ssl.key.password", "client_keystore_jks", {"ssl.keystore.password": "kafka-ds-test"}),
])
def test_a_wrong_password_names_the_option_never_the_password(
        material: tls.TlsMaterial, option: str, store: str, also: dict[str, str]) -> None:
    prefix = option.rsplit(".", 1)[0] if option != "ssl.key.password" else "ssl.keystore"
    message = _error(_java(material, **{f"{prefix}.location": str(getattr(material, store)),
                                        **also, option: WRONG}))
    assert f"{option} is wrong" in message and str(getattr(material, store)) in message
    assert WRONG not in message and material.password not in message


@pytest.mark.parametrize(("settings", "expected"), [
    ({"ssl.truststore.type": "JKS", "ssl.truststore.location": "ca_pem"},
     "ssl.truststore.type=JKS but ssl.truststore.location=.* holds a PEM file"),
    ({"ssl.truststore.type": "PEM", "ssl.truststore.location": "broker_truststore_p12",
      "ssl.truststore.password": "kafka-ds-test"},
     "ssl.truststore.type=PEM but ssl.truststore.location=.* holds a PKCS12 store"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "client_keystore_jks",
      "ssl.keystore.password": "kafka-ds-test"},
     "ssl.keystore.type=PEM but ssl.keystore.location=.* holds a JKS store"),
    ({"ssl.keystore.type": "BCFKS", "ssl.keystore.location": "client_keystore_p12"},
     "ssl.keystore.type=BCFKS is not supported"),
    ({"ssl.keystore.location": "broker_truststore_p12", "ssl.keystore.password": "kafka-ds-test"},
     "ssl.keystore.location=.* holds no private key"),
    ({"ssl.truststore.location": "client_key_pem"}, "ssl.truststore.location=.* holds no "
     "trusted certificate"),
    ({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "client_keystore_keytool_p12"},
     "is a password-protected PKCS12 store: set ssl.keystore.password"),
    ({"ssl.truststore.type": "JKS", "ssl.truststore.certificates": "ca_pem"},
     "ssl.truststore.certificates is PEM text: it needs ssl.truststore.type=PEM"),
    ({"ssl.keystore.key": "client_key_pem"}, "ssl.keystore.certificate.chain and "
     "ssl.keystore.key go together"),
])
def test_a_wrong_type_or_store_names_the_option(material: tls.TlsMaterial,
                                                settings: dict[str, str], expected: str) -> None:
    resolved = {}
    for key, value in settings.items():
        path = getattr(material, value, None)
        if path is not None and key.endswith((".certificates", ".key")):
            resolved[key] = Path(path).read_text()
        else:
            resolved[key] = str(path) if path is not None else value
    with pytest.raises(ConfigError, match=expected) as raised:
        ClientConfig.from_properties(_java(material, **resolved))
    assert material.password not in str(raised.value)
    assert "PRIVATE KEY-----" not in str(raised.value)


def test_a_jks_store_without_pyjks_names_the_extra(material: tls.TlsMaterial,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_jks(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "jks":
            raise ImportError("No module named 'jks'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_jks)
    message = _error(_java(material, **{"ssl.truststore.location": str(material.truststore_jks),
                                        "ssl.truststore.password": material.password}))
    assert "pip install 'kafka-ds[jks]'" in message
    # A PKCS12 store needs no extra, whatever its declared type.
    ClientConfig.from_properties(_java(material, **{
        "ssl.truststore.type": "JKS",
        "ssl.truststore.location": str(material.broker_truststore_p12),
        "ssl.truststore.password": material.password}))


def test_an_encrypted_pem_key_needs_ssl_key_password(material: tls.TlsMaterial,
                                                     tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(material.client_key_pem).read_bytes(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"pem-key-pass"))
    chain = Path(material.client_cert_pem).read_text()
    settings = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain,
                "ssl.keystore.key": encrypted.decode()}
    assert "ssl.keystore.key is encrypted: set ssl.key.password" in _error(
        _java(material, **settings))
    message = _error(_java(material, **settings, **{"ssl.key.password": WRONG}))
    assert "ssl.key.password is wrong" in message and WRONG not in message
    config = ClientConfig.from_properties(
        _java(material, **settings, **{"ssl.key.password": "pem-key-pass"}))
    assert config.connection.tls is not None and config.connection.tls.build_context()


def test_secrets_stay_out_of_the_repr(material: tls.TlsMaterial) -> None:
    stores = _stores(material)
    config = ClientConfig.from_properties(_java(material, **stores["keytool-jks"]))
    inline = ClientConfig.from_properties(_java(material, **stores["pem-strings"]))
    shown = repr(config) + repr(inline)
    assert material.password not in shown and material.key_password not in shown
    assert "PRIVATE KEY" not in shown


# --- no key file left behind -----------------------------------------------------------------

def _files_under(*directories: str | Path) -> set[str]:
    found = set()
    for directory in directories:
        for root, _, names in os.walk(directory):
            found.update(os.path.join(root, name) for name in names)
    return found


@pytest.mark.parametrize("memory_file", [True, False], ids=["memfd", "temporary-file"])
def test_the_key_reaches_openssl_encrypted_and_leaves_no_file(
        material: tls.TlsMaterial, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        memory_file: bool) -> None:
    """The key handed to OpenSSL sits in a 0600 file (an anonymous memory file where Linux has
    them), encrypted under a one-time password, and is gone once the context is built."""
    if memory_file and not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create on this OS")
    system_temp = tempfile.gettempdir()
    # Anything that uses a temporary directory uses this one, watched exactly (the system's
    # is shared with brokers and other test runs).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if not memory_file:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    seen: list[dict[str, Any]] = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, keyfile: str | None = None,
            password: Any = None) -> None:
        status = os.stat(certfile)
        with open(certfile, "rb") as file:
            content = file.read()
        seen.append({"path": certfile, "mode": stat.S_IMODE(status.st_mode),
                     "content": content, "password": password})
        real(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    watched = [tmp_path, material.directory]
    before = _files_under(*watched)
    ours_before = _ours(system_temp) | _ours(os.getcwd())
    monkeypatch.setattr(security, "_CONTEXTS", {})  # built afresh, not from the cache
    for kind in ("keytool-pkcs12", "keytool-jks", "pem-strings"):
        ClientConfig.from_properties(_java(material, **_stores(material)[kind]))
    assert len(seen) == 3
    for call in seen:
        assert call["mode"] == 0o600
        assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in call["content"]
        assert b"-----BEGIN PRIVATE KEY-----" not in call["content"]
        assert isinstance(call["password"], bytes) and len(call["password"]) >= 32
        assert not os.path.exists(call["path"]) or call["path"].startswith("/proc/self/fd/")
        if memory_file:
            assert call["path"].startswith("/proc/self/fd/")
        else:
            assert Path(call["path"]).parent == tmp_path
    assert len({call["password"] for call in seen}) == 3  # one-time: a new one each time
    assert _files_under(*watched) == before
    assert _ours(system_temp) | _ours(os.getcwd()) == ours_before


def _ours(directory: str) -> set[str]:
    return {name for name in os.listdir(directory) if name.startswith("kafka_ds-tls")}


def test_a_replaced_store_file_is_read_again(material: tls.TlsMaterial, tmp_path: Path) -> None:
    """Contexts are cached per store content: a rotated truststore takes effect."""
    path = tmp_path / "trust.pem"
    path.write_bytes(Path(material.ca_pem).read_bytes())
    config = TlsConfig(truststore_location=str(path))
    first = config.build_context()
    assert config.build_context() is first
    path.write_bytes(Path(material.untrusted_ca_pem).read_bytes())
    os.utime(path, ns=(0, os.stat(path).st_mtime_ns + 1_000_000))
    rotated = config.build_context()
    assert rotated is not first
    assert [dict(i[0] for i in ca["subject"])["commonName"] for ca in rotated.get_ca_certs()] == [
        "kafka-ds-untrusted-ca"]


def test_format_detection_reads_content_not_names(material: tls.TlsMaterial) -> None:
    read = lambda path: Path(path).read_bytes()  # noqa: E731
    assert keystores.detect_format(read(material.client_keystore_jks)) == "JKS"
    assert keystores.detect_format(read(material.client_keystore_keytool_p12)) == "PKCS12"
    assert keystores.detect_format(read(material.client_keystore_p12)) == "PKCS12"
    assert keystores.detect_format(read(material.ca_pem)) == "PEM"
    assert keystores.detect_format(b"\x30\x82\x01\x00\x02\x01\x01") is None  # not version 3
    assert keystores.detect_format(b"hello") is None
